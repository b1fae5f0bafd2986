"""Front ends of the machine: each uses only :class:`emu.machine.Machine`'s public API
and the event stream (:mod:`kernel_model.trace.events`), as CPython's pdb uses bdb.

``cli`` (the ``uprobe-emu`` command), ``trace`` (instruction traces), ``stepper`` (the
stepping engine and its gdb-like shell), ``gdbstub`` (the GDB remote protocol),
``bench`` (the kernel's trigger benchmarks), ``hostdiff`` (``diff`` against the host
kernel's uprobes) and ``testing`` (the pytest plugin).
"""
