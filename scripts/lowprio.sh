#!/usr/bin/env bash
# Run a command at the lowest CPU and I/O priority, as a group: make test's CPU lane (Makefile TEST_LOW).
# nice alone is per thread, so a suite with many runnable threads (the kernel's CPU emulator runs one OS
# thread per CUDA thread) would still take most of the CPU from the lane beside it. Here the command
# and everything it starts share one control group of the lowest CPU weight (cgroup v2 cpu.weight 1, or
# v1 cpu.shares 2: kdtree-low), and run SCHED_IDLE with the idle I/O class: they get the CPU the other
# lane leaves idle. Where no control group can be made (no write access), SCHED_IDLE and the I/O class
# alone. Usage: scripts/lowprio.sh CMD [ARG...]
set -euo pipefail
(($#)) || { echo "usage: lowprio.sh CMD [ARG...]" >&2; exit 2; }

join_low_group() {
  local root=/sys/fs/cgroup group
  if [[ -f $root/cgroup.controllers ]]; then # cgroup v2
    group=$root/kdtree-low
    grep -qw cpu $root/cgroup.subtree_control 2>/dev/null || echo +cpu >$root/cgroup.subtree_control
    mkdir -p $group && echo 1 >$group/cpu.weight && echo $$ >$group/cgroup.procs
  elif [[ -d $root/cpu ]]; then # cgroup v1, the cpu controller mounted on its own
    group=$root/cpu/kdtree-low
    mkdir -p $group && echo 2 >$group/cpu.shares && echo $$ >$group/cgroup.procs
    # the lane's CPU time, for make test's table (scripts/testtime.py): cpuacct where mounted apart
    if [[ -d $root/cpuacct && ! $root/cpuacct -ef $root/cpu ]]; then
      mkdir -p $root/cpuacct/kdtree-low && echo $$ >$root/cpuacct/kdtree-low/cgroup.procs || true
    fi
  else
    return 1
  fi
}

join_low_group 2>/dev/null || echo "lowprio: no control group could be made here: SCHED_IDLE alone" >&2
exec chrt --idle 0 ionice -c 3 "$@"
