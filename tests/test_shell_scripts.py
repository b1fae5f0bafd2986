"""Shell scripts of builtins under busybox ``sh -c`` and ``bash-static -c`` match a native
run of the same binary byte for byte: exit status, stdout, stderr, and the files the
script leaves in its directory (the guest's working directory, granted to it).

Commands that ``execve`` another binary (applets, coreutils, scripts) match native too.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from guest_compare import BASH, BUSYBOX, fresh_dir, model, native, require

FILES = {
    "a.txt": b"hello\n",
    "lines.txt": b"one\ntwo words\n  three\n",
    "sub/inner.txt": b"inner\n",
    "run.sh": b"#!/bin/sh\necho run\n",
}
STDIN = b"first stdin line\nsecond\n"
SHELLS = {"busybox": [BUSYBOX, "sh", "-c"], "bash": [BASH, "-c"]}

# (name, script): run by both shells
BOTH = [
    ("printf", "printf '%s=%d\\n' a 1 b 2; printf '%05.1f|%x|%o|%c|%%\\n' 3.14159 255 8 z"),
    ("echo_pipe_read", 'echo a | read x; echo "[$x]"'),
    ("command_substitution", 'x=$(echo sub); y=$(printf "%s" "$x" | { read z; echo "$z$z"; }); echo "$x $y"'),
    ("nested_substitution", 'echo "$(echo "$(echo deep)")" $(exit 3) $?'),
    (
        "redirect_create_append_read",
        "echo one > out.txt; echo two >> out.txt; read l < out.txt; "
        'echo "$l"; while read l; do echo "<$l>"; done < out.txt',
    ),
    ("redirect_stderr_to_stdout", "{ echo to-err >&2; echo to-out; } 2>&1; echo done"),
    ("redirect_stderr_to_a_file", '{ echo e1 >&2; echo o1; } 2> err.txt; read e < err.txt; echo "got $e"'),
    ("redirect_noclobber", 'set -C; echo x > a.txt; echo "status $?"'),
    ("stdin_of_the_shell", 'read a; read b; echo "$b/$a"'),
    ("background_and_wait", "(echo bg) & wait; echo waited $?"),
    ("wait_pid_status", '(exit 7) & p=$!; wait $p; echo "status $?"; [ "$p" != "$$" ] && echo distinct'),
    ("wait_several", '(exit 1) & (exit 2) & wait; echo "all $?"'),
    ("trap_exit", "trap 'echo bye $?' EXIT; echo hi; exit 5"),
    ("trap_int_kill_self", "trap 'echo got INT' INT; kill -INT $$; echo after"),
    ("trap_reset_then_ignore", "trap 'echo no' TERM; trap - TERM; trap '' TERM; kill -TERM $$; echo survived"),
    ("heredoc_into_read", 'read x <<EOF\nhello $((1+2))\nEOF\necho "[$x]"'),
    ("heredoc_quoted_loop", "while read l; do echo \"<$l>\"; done <<'EOF'\n$a\n b\nEOF"),
    ("cd_pwd", "cd sub && pwd && cd .. && pwd && cd / && pwd"),
    ("cd_missing", 'cd nowhere; echo "status $?"'),
    ("subshell_keeps_parent", 'x=1; (x=2; cd sub; echo "in $x"); echo "out $x"; pwd'),
    ("functions", 'f() { v=$1; echo "f:$v"; return 3; }; f x; echo "$? $v"; g() { f "$@"; }; g y z'),
    ("arithmetic", "i=0; i=$((i+1)); echo $((7*6)) $((17%5)) $((1<<4)) $(((3+4)*2)) $((-7/2)) $i"),
    ("read_loop_over_file", 'n=0; while read -r l; do n=$((n+1)); echo "$n:[$l]"; done < lines.txt; echo $n'),
    (
        "exec_fd3",
        "exec 3> fd3.txt; echo three >&3; echo more >&3; exec 3>&-; "
        'exec 4< fd3.txt; read t <&4; read u <&4; exec 4<&-; echo "$t $u"',
    ),
    ("set_e", "set -e; echo before; false; echo notreached"),
    ("ulimit_n", "ulimit -n; ulimit -Hn"),
    ("umask", "umask; umask 027; umask; echo x > masked.txt; umask 0; echo y > open.txt; echo ok"),
    ("kill_0", 'kill -0 $$ && echo alive; kill -0 2147483000 2>/dev/null; echo "gone $?"'),
    (
        "pid_consistency",
        'a=$$; (b=$$; [ "$a" = "$b" ] && echo same-pid); '
        '[ "$(echo $PPID)" = "$PPID" ] && echo same-ppid; [ "$$" -gt 0 ] && echo positive',
    ),
    ("type_builtins", 'type echo; type cd; type nosuchcommand; echo "status $?"'),
    ("command_v", 'command -v echo; command -v cd; command -v nosuchcommand; echo "status $?"'),
    ("glob", "echo *; echo *.txt; echo sub/*; echo nomatch*"),
    (
        "test_files",
        "[ -f a.txt ] && echo file; [ -d sub ] && echo dir; test -x run.sh || echo not-exec; "
        "[ -e nope ] || echo none; [ -s a.txt ] && echo nonempty; [ a.txt -nt nope ] && echo newer",
    ),
    ("exit_status", "false; echo $?; ! true; echo $?; exit 9"),
    (
        "case_and_loops",
        "for w in a b c; do case $w in b) continue;; esac; echo $w; done; "
        "i=0; until [ $i -ge 3 ]; do i=$((i+1)); done; echo $i",
    ),
    ("string_ops", "v=hello.tar.gz; echo ${v%.gz} ${v%%.*} ${v#*.} ${#v} ${u:-dflt} ${v:+set}"),
    ("syntax_error", "echo $(("),
    # a bash extension: busybox's ash (this build) rejects it as a syntax error
    ("here_string", 'read x <<< "word here"; echo "[$x]"; read -r a b <<< "$x"; echo "$b,$a"'),
]

BASH_ONLY = [
    ("trap_err", "trap 'echo err $?' ERR; false; echo after"),
    ("bashpid", '[ "$BASHPID" = "$$" ] && echo top; (echo $(( BASHPID != $$ )))'),
    ("pipestatus", 'true | false | true; echo "${PIPESTATUS[@]}"'),
    ("type_t", "type -t echo; type -t cd; type -t f; f() { :; }; type -t f"),
    ("arrays", 'a=(x y z); echo ${#a[@]} ${a[1]}; a+=(w); echo "${a[*]}"'),
]

CASES = [(sh, name, script) for name, script in BOTH for sh in SHELLS] + [
    ("bash", name, script) for name, script in BASH_ONLY
]


@pytest.mark.parametrize("shell, name, script", CASES, ids=[f"{s}-{n}" for s, n, _ in CASES])
def test_script_matches_native(tmp_path, shell, name, script):
    argv = [require(SHELLS[shell][0]), *SHELLS[shell][1:], script]
    work = tmp_path / "w"
    want = native(argv, fresh_dir(work, FILES), STDIN), listing(work)
    got = model(argv, fresh_dir(work, FILES), STDIN), listing(work)
    assert got == want, f"{shell} -c {script!r}\n  native {want!r}\n  model  {got!r}"


def listing(work: Path) -> list:
    """Files the script left: path, mode, contents."""
    out = []
    for dirpath, dirnames, filenames in os.walk(work):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            out.append((str(p.relative_to(work)), oct(p.stat().st_mode), p.read_bytes()))
    return out


# ------------------------------------------------------------------ commands that execve
EXEC_CASES = [
    ("busybox", 'cat a.txt; echo "status $?"'),
    ("busybox", 'x=$(cat a.txt); echo "[$x] $?"'),
    ("busybox", '/bin/busybox true; echo "status $?"'),
    ("busybox", './run.sh; echo "status $?"; chmod +x run.sh; ./run.sh; echo "status $?"'),
    ("busybox", 'nosuchprogram; echo "status $?"; exec cat lines.txt'),
    ("bash", 'cat a.txt; echo "status $?"'),
    ("bash", '/bin/busybox true; echo "status $?"'),
    ("bash", 'ls; ./run.sh; echo "status $?"; chmod +x run.sh; ./run.sh; echo "status $?"'),
    ("bash", "cat < lines.txt | wc -l; exec /bin/busybox echo last"),
]


@pytest.mark.parametrize("shell, script", EXEC_CASES)
def test_command_needing_execve_matches_native(tmp_path, shell, script):
    """The shell forks and the child execs the program (or the shell execs it itself):
    output, status and the files left are the native run's."""
    argv = [require(SHELLS[shell][0]), *SHELLS[shell][1:], script]
    work = tmp_path / "w"
    want = native(argv, fresh_dir(work, FILES), STDIN), listing(work)
    start = time.monotonic()
    got = model(argv, fresh_dir(work, FILES), STDIN), listing(work)
    assert got == want, f"{shell} -c {script!r}\n  native {want!r}\n  model  {got!r}"
    assert time.monotonic() - start < 30, "a command run through execve took over 30 s"
