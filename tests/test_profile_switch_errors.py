"""A kernel switch given a value outside its choices is refused with one InputError line
that lists the choices - for the boolean switches too, whose choices are not strings."""

from __future__ import annotations

import pytest

from kernel_model.errors import InputError
from kernel_model.profiles import KernelProfile


@pytest.mark.parametrize(
    "switch,value,expected",
    [
        ("remove_rechecks_filter", "yes", "kernel switch remove_rechecks_filter is one of False, True, not 'yes'"),
        ("sstep_siglock", "no", "kernel switch sstep_siglock is one of True, False, not 'no'"),
        ("treelock", "mutex", "kernel switch treelock is one of spinlock, rwlock, seqcount, percpu_rwsem, not 'mutex'"),
    ],
)
def test_bad_switch_value_is_an_input_error(switch, value, expected):
    with pytest.raises(InputError) as exc:
        KernelProfile.get("latest", **{switch: value})
    assert str(exc.value) == expected, f"expected {expected!r}, got {str(exc.value)!r}"
