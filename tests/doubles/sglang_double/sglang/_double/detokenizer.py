"""TEST DOUBLE of sglang.srt.managers.detokenizer_manager.run_detokenizer_process."""

from __future__ import annotations

import argparse
import logging
import time

from sglang._double.logs import configure_logger
from sglang._double.proc import kill_itself_when_parent_died, set_process_title

logger = logging.getLogger(__name__)


def run_detokenizer_process(args: argparse.Namespace) -> None:
    set_process_title("sglang::detokenizer")
    configure_logger("", args.log_level)
    kill_itself_when_parent_died()
    while True:
        time.sleep(3600)
