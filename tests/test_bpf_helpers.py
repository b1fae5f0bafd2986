"""The BPF helpers a uprobe program calls (kernel_model/bpf/helpers.py, through
kernel_model/trace/bpf_trace.py) against what Linux 6.18 returns: each program of
guest_programs/bpf/test_helpers.bpf.c runs at probed(s, n) of tests/c/bpf_calls.c and
leaves its helpers' results in globals, which the tests compare with the guest's own
view (its ids, its clock, its return addresses) and with values a 6.18 host gave for
the same object and guest (the trace_pipe line, bpf_get_stack's chain, the string
helpers' returns)."""

from __future__ import annotations

import re

import pytest

from emu import Machine

EFAULT, EINVAL = 14, 22
TEXT = b"hello, bpf"  # bpf_calls.c's text[], the string probed() gets
SIGUSR1, SIGUSR2 = 10, 12


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("bpf_calls.c", "-static", name="bpf_calls")  # static: no ld.so to run, 3x faster


@pytest.fixture(scope="module")
def helpers_obj(build_bpf):
    return build_bpf("test_helpers.bpf.c")


class Run:
    """One run of the guest with programs attached: the machine, the loaded object,
    the result, and the globals decoded."""

    def __init__(self, m: Machine, obj, result) -> None:
        self.m, self.obj, self.result = m, obj, result
        self.stdout = result.stdout.decode()

    def ints(self, name: str, size: int = 8, signed: bool = True) -> list[int]:
        raw = self.obj.variable(name)
        return [int.from_bytes(raw[i : i + size], "little", signed=signed) for i in range(0, len(raw), size)]

    def int(self, name: str, size: int = 8, signed: bool = True) -> int:
        (value,) = self.ints(name, size, signed)
        return value

    def field(self, key: str) -> list[str]:
        """The words after ``key`` on the guest's line that starts with it."""
        line = next(ln for ln in self.stdout.splitlines() if ln.startswith(key + " "))
        return line.split()[1:]


# the programs that share one run of "calls 2" (each writes globals of its own)
SHARED = ("read_arg", "read_str", "loops", "formats", "compare", "printk", "func_ip_entry", "func_ip_return")


@pytest.fixture(scope="module")
def run(guest, helpers_obj):
    """run(progs, *argv, target=, rodata=, **machine_kw) -> Run, one run per distinct
    request (tests reading other globals of the same run share it)."""
    cache: dict = {}

    def run_one(progs: str | tuple[str, ...], *argv: str, target: str = "probed", rodata=None, **machine_kw) -> Run:
        names = (progs,) if isinstance(progs, str) else progs
        key = (names, argv, target, tuple(sorted((rodata or {}).items())), tuple(sorted(machine_kw.items())))
        if key not in cache:
            m = Machine.from_elf(guest, argv=[guest, *argv], **machine_kw)
            obj = m.bpf.load(helpers_obj, attach={p: f"{guest}:{target}" for p in names}, rodata=rodata)
            result = m.run()
            assert (result.reason, result.exit_code) == ("exit", 0), result.describe()
            assert m.kernel.bpf.errors == [], m.kernel.bpf.errors
            cache[key] = Run(m, obj, result)
        return cache[key]

    return run_one


@pytest.fixture(scope="module")
def shared(run):
    """The programs of SHARED at probed(text, 0) and probed(text, 1)."""
    return run(SHARED, "calls", "2")


@pytest.fixture(scope="module")
def ids(run):
    """The ids program at two calls between two clock reads, as uid 1000 gid 100."""
    return run("ids", "ids", uid=1000, gid=100)


# ----------------------------------------------------------------------------- the current task


def test_get_current_pid_tgid_is_the_guests_tgid_and_tid(ids):
    words = ids.field("pid")  # pid P tid T uid U gid G
    pid, tid = int(words[0]), int(words[2])
    assert ids.int("pid_tgid") == (pid << 32) | tid, f"pid_tgid {ids.int('pid_tgid'):#x}, guest pid {pid} tid {tid}"


def test_get_current_uid_gid_is_the_guests_credentials(ids):
    words = ids.field("pid")
    assert (int(words[4]), int(words[6])) == (1000, 100)
    assert ids.int("uid_gid") == (100 << 32) | 1000, f"uid_gid {ids.int('uid_gid'):#x}"


@pytest.mark.parametrize(
    ("name", "expected"),
    [("comm", b"bpf_calls" + bytes(7)), ("comm_short", b"bpf\0")],
    ids=["16-byte buffer", "4-byte buffer"],
)
def test_get_current_comm_copies_the_comm_nul_padded_and_cut_to_the_buffer(ids, name, expected):
    assert ids.obj.variable(name) == expected


@pytest.mark.parametrize("cpu", [0, 1])
def test_get_smp_processor_id_is_the_cpu_the_task_runs_on(run, cpu):
    r = run(("ids", "count_cpu"), "cpu", str(cpu), cpus=2)
    assert r.field("cpu") == [str(cpu)], r.stdout
    assert r.int("cpu") == cpu


def test_ktime_get_ns_lies_between_the_guests_clock_reads_and_increases(ids):
    """Each clock read moves the model's clock on (a guest's clock_gettime and a
    program's bpf_ktime_get_ns alike): the two hits read two times strictly between the
    guest's CLOCK_MONOTONIC before and after them."""
    before, after = map(int, ids.field("clock"))
    ktimes = ids.ints("ktime")
    assert ids.int("hits", 4) == 2
    assert before < ktimes[0] < ktimes[1] < after, f"CLOCK_MONOTONIC {before}..{after}, bpf_ktime_get_ns {ktimes}"


# ----------------------------------------------------------------------------- user memory


def test_probe_read_user_copies_the_argument_buffer(shared):
    assert shared.int("read_ret") == 0
    assert shared.obj.variable("arg_bytes") == TEXT + bytes(16 - len(TEXT))


@pytest.mark.parametrize(
    "index",
    [0, 1, 2],
    ids=["unmapped page", "kernel address", "across the end of user space"],
)
def test_probe_read_user_fault_returns_efault_and_zeroes_the_destination(shared, index):
    assert shared.ints("fault_ret")[index] == -EFAULT
    assert shared.ints("fault_dst")[index] == 0, "the destination (0x1111... before) must be zeroed"


STRINGS = [
    # the string, bpf_probe_read_user_str's return into 32 bytes, into 5 bytes
    ("", 1, 1),
    ("abcd", 5, 5),
    ("x" * 31, 32, 5),
    ("y" * 40, 32, 5),
]


@pytest.fixture(scope="module")
def strings(run):
    return run("read_str", "str", *(text for text, _, _ in STRINGS))


@pytest.mark.parametrize(("hit", "case"), list(enumerate(STRINGS)), ids=["empty", "fits 5", "fits 32", "longer"])
def test_probe_read_user_str_returns_the_length_with_the_nul_or_the_size(strings, hit, case):
    text, full_ret, cut_ret = case
    raw = text.encode()
    assert (strings.ints("str_ret")[hit], strings.ints("cut_ret")[hit]) == (full_ret, cut_ret)
    full = raw[:31] + b"\0"
    assert strings.obj.variable("str_full")[32 * hit : 32 * hit + 32] == full + bytes(32 - len(full))
    cut = raw[:4] + b"\0"
    assert strings.obj.variable("str_cut")[5 * hit : 5 * hit + 5] == cut + bytes(5 - len(cut)), "cut: NUL-ended"


def test_probe_read_user_str_of_the_argument(shared):
    assert (shared.ints("str_ret")[:3], shared.ints("cut_ret")[:3]) == ([11, 11, 0], [5, 5, 0])
    assert shared.obj.variable("str_full")[:32] == TEXT + bytes(32 - len(TEXT))
    assert shared.obj.variable("str_cut")[:5] == b"hell\0"


def test_probe_read_user_str_fault_returns_efault_and_zeroes_the_destination(shared):
    assert shared.int("str_fault_ret") == -EFAULT
    assert shared.obj.variable("str_fault_dst") == bytes(8)


# ----------------------------------------------------------------------------- the probe


def test_get_func_ip_at_an_entry_probe_is_the_function(shared):
    probed = shared.m.resolve("probed")
    assert shared.ints("func_ip", signed=False)[:3] == [probed, probed, 0]


def test_get_func_ip_inside_a_function_is_the_probed_address(run):
    r = run("func_ip_entry", "calls", "2", target="probed+1")
    assert r.ints("func_ip", signed=False)[:3] == [r.m.resolve("probed") + 1] * 2 + [0]


def test_get_func_ip_at_a_return_probe_is_the_function_entry(shared):
    probed = shared.m.resolve("probed")
    assert shared.ints("return_func_ip", signed=False)[:3] == [probed, probed, 0]


def test_a_return_probe_sees_the_return_value_in_rax(shared):
    assert shared.stdout == "probed 3\nprobed 5\n"
    assert shared.int("ret_rax") == 5


def _load(guest, helpers_obj, *argv):
    m = Machine.from_elf(guest, argv=[guest, *argv])
    return m, m.bpf.load(helpers_obj)


def _u64s(raw: bytes) -> list[int]:
    return [int.from_bytes(raw[i : i + 8], "little") for i in range(0, len(raw), 8)]


def test_get_attach_cookie_is_the_perf_events_cookie(guest, helpers_obj):
    m, obj = _load(guest, helpers_obj, "calls", "2")
    file, offset = m.uprobes.targets.resolve_target(f"{guest}:probed")
    m.kernel.bpf.attach_uprobe(obj.programs["cookie_perf"], file, offset, cookie=0xC0FFEE)
    m.run()
    assert _u64s(obj.variable("cookies"))[:3] == [0xC0FFEE, 0xC0FFEE, 0]


def test_get_attach_cookie_of_a_multi_link_is_the_offsets_own(guest, helpers_obj):
    m, obj = _load(guest, helpers_obj, "calls", "2")
    file, probed = m.uprobes.targets.resolve_target(f"{guest}:probed")
    _, callee = m.uprobes.targets.resolve_target(f"{guest}:callee")
    m.kernel.bpf.attach_uprobe_multi(obj.programs["cookie_multi"], file, [probed, callee], cookies=[5, 7])
    m.run()
    assert _u64s(obj.variable("cookies")) == [5, 7, 5, 7], "probed() calls callee(): the hits alternate"


def test_get_stack_user_stack_is_the_call_chain_with_the_caller_at_function_entry(run):
    """At probed's first instruction (push %rbp) the chain is the probed ip, the return
    address at the stack pointer (probed's caller, level2), then the rbp chain (level1,
    main, and on into libc until a frame cannot be read): seven entries, as a 6.18 host
    stores them for this static guest (the last one whatever libc's frame holds)."""
    r = run("user_stack", "stack")
    probed = int(r.field("probed")[0], 16)
    rets = [int(ln.split()[1], 16) for ln in r.stdout.splitlines() if ln.startswith("ret ")]
    stack = r.ints("stack", signed=False)
    assert r.int("stack_len") == 56
    assert stack[:4] == [probed, *rets], [hex(a) for a in stack]
    assert stack[7] == 0, "the rest of the buffer is zeroed"


def test_get_stack_skips_the_first_entries_of_the_skip_field(run):
    r = run("user_stack", "stack")
    assert r.int("skip_len") == 16
    assert r.ints("skipped", signed=False) == r.ints("stack", signed=False)[2:4]


def test_get_stack_with_an_unknown_flag_is_einval_with_the_buffer_zeroed(run):
    r = run("user_stack", "stack")
    assert r.int("bad_stack_ret") == -EINVAL
    assert r.obj.variable("bad_stack") == bytes(16), "the buffer held 1, 2 before"


# ----------------------------------------------------------------------------- signals


def test_send_signal_runs_the_guests_handler_before_the_probed_function(run):
    r = run("send_signal", "signal", rodata={"signal_number": SIGUSR1})
    assert r.int("signal_ret") == 0
    assert r.stdout == "handled 10\nprobed 3\nafter\n"


def test_send_signal_of_a_fatal_signal_kills_the_process(guest, helpers_obj):
    m = Machine.from_elf(guest, argv=[guest, "signal"])
    m.bpf.load(helpers_obj, attach={"send_signal": f"{guest}:probed"}, rodata={"signal_number": SIGUSR2})
    result = m.run()
    assert (result.reason, result.signal) == ("signal", SIGUSR2), result.describe()
    assert b"probed" not in result.stdout


def test_send_signal_of_an_invalid_signal_is_einval(run):
    r = run("send_signal", "signal", rodata={"signal_number": 65})
    assert r.int("signal_ret") == -EINVAL
    assert r.stdout == "probed 3\nafter\n"


# ----------------------------------------------------------------------------- printing and strings


def test_trace_printk_lines_are_trace_pipes(shared):
    """The lines and the flags column a 6.18 host's trace file shows for this program:
    ``...11`` (preempt-depth 1, migrate-disable 1), a newline at the format's end not
    doubled, ``%%`` a percent sign; %d %u %x of -5 and 255, %lld, %s of a user string, %c,
    flags and widths."""
    pid = shared.m.process.pid
    lines = shared.m.kernel.bpf.printk_lines
    messages = [
        *("d=-5 u=4294967291 x=ff", "lld=-1099511627776 s=hello, bpf c=Z", "100% n=0", "[  -42|7   |00a]"),
        *("d=-5 u=4294967291 x=ff", "lld=-1099511627776 s=hello, bpf c=Z", "100% n=1", "[  -42|7   |00a]"),
    ]
    assert len(lines) == len(messages), lines
    stamps = []
    for line, msg in zip(lines, messages):
        pattern = rf"       bpf_calls-{pid:<7d} \[000\] \.\.\.11 +(\d+\.\d{{6}}): bpf_trace_printk: {re.escape(msg)}"
        found = re.fullmatch(pattern, line)
        assert found, f"{line!r} does not match {pattern!r}"
        stamps.append(float(found[1]))
    assert stamps == sorted(stamps), stamps


def test_trace_printk_returns_the_formatted_length(shared):
    assert shared.ints("printk_ret")[:3] + shared.ints("printk_ret")[4:5] == [23, 35, 8, 16]


@pytest.mark.parametrize(
    ("index", "fmt"),
    [(3, "bad %q"), (5, "short %hd"), (6, "precision %.2s"), (7, "control \\x01")],
    ids=["unknown conversion", "h length", "precision", "control character"],
)
def test_trace_printk_of_a_format_the_kernel_refuses_is_einval(shared, index, fmt):
    assert shared.ints("printk_ret")[index] == -EINVAL, f"bpf_trace_printk({fmt!r})"


@pytest.mark.parametrize(
    ("index", "loop", "for_each"),
    [(0, (10, 45), (6, 210)), (1, (3, 3), (3, 60)), (2, (1, 0), (1, 10))],
    ids=["to the end", "stop at the third", "stop at the first"],
)
def test_bpf_loop_and_for_each_map_elem_count_the_calls_and_stop_on_1(shared, index, loop, for_each):
    """bpf_loop(10) over indexes 0-9 and for_each over the array 10, 20, ... 60: the
    number of calls made, the callback's 1 ending the walk after its own call."""
    assert (shared.ints("loop_ret")[index], shared.ints("loop_sum")[index]) == loop
    assert (shared.ints("for_each_ret")[index], shared.ints("for_each_sum")[index]) == for_each


def test_snprintf_formats_and_returns_the_length_with_the_nul(shared):
    out = b"-7-hello, bpf-beef"
    assert shared.int("snprintf_ret") == len(out) + 1
    assert shared.obj.variable("snprintf_out") == out + bytes(32 - len(out))


def test_snprintf_cut_to_the_buffer_ends_with_a_nul_and_returns_the_full_length(shared):
    assert shared.int("snprintf_cut_ret") == 19
    assert shared.obj.variable("snprintf_cut") == b"-7-he\0"


def test_strncmp_returns_the_sign_of_the_first_difference(shared):
    # "hello, " vs "hello, " / its first 5 bytes vs "hello!" / vs "help" / vs "hell"
    assert shared.ints("strncmp_ret") == [0, 0, -1, 1]


# ----------------------------------------------------------------------------- per-CPU maps


@pytest.mark.parametrize("cpu", [0, 1])
def test_percpu_array_counts_on_the_cpu_the_task_ran_on(run, cpu):
    r = run(("ids", "count_cpu"), "cpu", str(cpu), cpus=2)
    assert r.obj.maps["per_cpu"][0] == [3 if c == cpu else 0 for c in range(2)]
