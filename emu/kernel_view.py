"""The kernel's state and operations as attributes of the machine.

The machine is the context the syscall handlers and front ends see: ``machine.task``,
``machine.send_sig(...)`` are the kernel's own (:class:`kernel_model.kernel.kernel.Kernel`),
reached through a property that hands out the kernel's attribute or bound method with no
call in between.  The helpers here make those properties and give them the kernel's types
for the type checker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

if TYPE_CHECKING:
    from kernel_model.kernel.kernel import Kernel

_P = ParamSpec("_P")
_R = TypeVar("_R")


class KernelMethod(Generic[_P, _R]):
    """What :func:`kernel_method` makes, to the type checker: read on a machine, the
    kernel's bound method (at run time it is a plain ``property``)."""

    if TYPE_CHECKING:

        def __get__(self, obj: object, owner: type | None = None) -> Callable[_P, _R]: ...


def kernel_method(method: Callable[Concatenate[Kernel, _P], _R]) -> KernelMethod[_P, _R]:
    """The kernel's ``method``, read through the machine: a property giving the kernel's
    bound method, with the method's docstring."""
    name = method.__name__
    # a property, given the type of what it hands out (see KernelMethod)
    return property(lambda self: getattr(self.kernel, name), doc=method.__doc__)  # type: ignore[return-value]


def kernel_state(name: str) -> Any:
    """The kernel's attribute ``name`` (its state), read through the machine: a property,
    typed by the annotation of the machine's attribute it becomes (hence ``Any`` here)."""
    return property(lambda self: getattr(self.kernel, name))
