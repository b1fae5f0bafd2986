"""``uprobe-emu sweep``: probe every instruction, function entry or return of a program,
many sites per run, bisect only the runs that differ from the unprobed one, and report
where probing is not invisible - in the model under any kernel profile, and with
``--host`` under the running kernel's uprobes.

Modules: :mod:`.sites` (where to probe), :mod:`.case` (the picklable case and the one
case function), :mod:`.compare` (a run's digest, where two runs part), :mod:`.bisect`
(batch, then bisect), :mod:`.classify` (the kernel-faithful exceptions),
:mod:`.runners` (serial, pool, Ray), :mod:`.driver` (one program, one profile),
:mod:`.host` (the host kernel through tracefs), :mod:`.report` (table, JSON, JSONL,
resume, progress), :mod:`.cli`.
"""

from emu.frontends.sweep.args import add_cli

__all__ = ["add_cli"]
