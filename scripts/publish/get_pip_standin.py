"""A local stand-in for the get-pip.py bootstrap script ansible-test downloads.

ansible-test (--venv) runs its cached ~/.ansible/test/cache/get_pip_<version>.py with the arguments it
would give get-pip.py (pip options, then ``pip==<version>``, ``--no-setuptools``, ``--no-wheel``). The
download host is out of reach from this project's build machines, so scripts/publish/ansible-test.sh puts
this file there: it bootstraps pip from the interpreter's own ``ensurepip`` wheel, then installs the
pinned packages from the configured package index, as get-pip.py would.
"""

import subprocess
import sys

DROP = {"--no-setuptools", "--no-wheel"}


def main(argv: list[str]) -> int:
    ensurepip = [sys.executable, "-m", "ensurepip", "--default-pip"]
    subprocess.run(ensurepip, check=True, stdout=subprocess.DEVNULL)
    args = [a for a in argv if a not in DROP]
    return subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
