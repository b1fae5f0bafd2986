"""``include/uapi/linux/perf_event.h``: what the syscall entry and sysfs share of perf."""

# the dynamic PMU type the host's 6.18 kernel gave the uprobe PMU
# (/sys/bus/event_source/devices/uprobe/type)
PERF_TYPE_UPROBE = 8
