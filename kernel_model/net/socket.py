"""The socket calls (net/socket.c) of a machine without network: ``socket`` fails and
every socket call on a descriptor answers as the kernel does for a non-socket.
"""

from __future__ import annotations

import errno as E

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import int_arg, syscall

AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
NPROTO, SOCK_MAX, SOCK_TYPE_MASK = 46, 11, 0xF
SOCK_NONBLOCK, SOCK_CLOEXEC = 0o4000, 0o2000000
MSG_CMSG_COMPAT = 0x80000000
NO_NETWORK = "no network: EACCES for AF_UNIX/AF_INET/AF_INET6, EAFNOSUPPORT otherwise"
NOT_A_SOCKET = "no descriptor is a socket: EBADF or ENOTSOCK"


class SocketSyscalls:
    """No network."""

    @syscall(41, "socket", partial=NO_NETWORK)
    @syscall(53, "socketpair", partial=NO_NETWORK)
    def sys_socket(self, task, regs, family, type_, protocol, *_):
        """__sys_socket/__sock_create on a kernel whose only families are AF_UNIX,
        AF_INET and AF_INET6 and whose security module denies creating those: EINVAL
        for bad flags or types, EAFNOSUPPORT for other families, EACCES."""
        family, type_ = int_arg(family), int_arg(type_)
        if type_ & ~SOCK_TYPE_MASK & ~(SOCK_CLOEXEC | SOCK_NONBLOCK):
            return neg(E.EINVAL)
        if not 0 <= family < NPROTO:
            return neg(E.EAFNOSUPPORT)
        if not 0 <= type_ & SOCK_TYPE_MASK < SOCK_MAX:
            return neg(E.EINVAL)
        if family in (AF_UNIX, AF_INET, AF_INET6):
            return neg(E.EACCES)  # security_socket_create
        return neg(E.EAFNOSUPPORT)

    def _sockfd_lookup(self, task, fd) -> int:
        """sockfd_lookup_light: EBADF for no descriptor, ENOTSOCK for any other (no
        descriptor of the model is a socket)."""
        return neg(E.ENOTSOCK) if task.process.files.get(fd & 0xFFFFFFFF) else neg(E.EBADF)

    @syscall(51, "getsockname", partial=NOT_A_SOCKET)
    @syscall(52, "getpeername", partial=NOT_A_SOCKET)
    @syscall(55, "getsockopt", partial=NOT_A_SOCKET)
    @syscall(54, "setsockopt", partial=NOT_A_SOCKET)
    @syscall(49, "bind", partial=NOT_A_SOCKET)
    @syscall(42, "connect", partial=NOT_A_SOCKET)
    @syscall(50, "listen", partial=NOT_A_SOCKET)
    @syscall(48, "shutdown", partial=NOT_A_SOCKET)
    @syscall(43, "accept", partial=NOT_A_SOCKET)
    @syscall(44, "sendto", partial=NOT_A_SOCKET)
    @syscall(45, "recvfrom", partial=NOT_A_SOCKET)
    def sock_call(self, task, regs, fd, *_):
        """The calls on a socket descriptor: none is one."""
        return self._sockfd_lookup(task, fd)

    @syscall(288, "accept4", partial=NOT_A_SOCKET)
    def sys_accept4(self, task, regs, fd, addr, addrlen, flags, *_):
        if int_arg(flags) & ~(SOCK_CLOEXEC | SOCK_NONBLOCK):
            return neg(E.EINVAL)
        return self._sockfd_lookup(task, fd)

    @syscall(46, "sendmsg", partial=NOT_A_SOCKET)
    @syscall(47, "recvmsg", partial=NOT_A_SOCKET)
    def sys_sendmsg(self, task, regs, fd, msg, flags, *_):
        if flags & MSG_CMSG_COMPAT:  # forbid_cmsg_compat
            return neg(E.EINVAL)
        return self._sockfd_lookup(task, fd)
