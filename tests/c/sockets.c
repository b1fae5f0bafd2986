/* Socket calls on descriptors that are not sockets, and socket() for several families
 * (raw syscalls, one line each: "name rc errno"). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static void show(const char *what, long rc) {
    printf("%-26s rc=%ld errno=%s\n", what, rc, rc < 0 ? strerrorname_np(errno) : "0");
}

int main(void) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    int v, fds[2];
    socklen_t vlen = sizeof v;
    show("getpeername(0)", syscall(SYS_getpeername, 0, &sa, &len));
    show("getpeername(99)", syscall(SYS_getpeername, 99, &sa, &len));
    show("getpeername(-1)", syscall(SYS_getpeername, -1, &sa, &len));
    show("getsockname(1)", syscall(SYS_getsockname, 1, &sa, &len));
    show("getsockname(99)", syscall(SYS_getsockname, 99, &sa, &len));
    show("getsockopt(2)", syscall(SYS_getsockopt, 2, SOL_SOCKET, SO_TYPE, &v, &vlen));
    show("getsockopt(99)", syscall(SYS_getsockopt, 99, SOL_SOCKET, SO_TYPE, &v, &vlen));
    show("setsockopt(0)", syscall(SYS_setsockopt, 0, SOL_SOCKET, SO_REUSEADDR, &v, vlen));
    show("connect(0)", syscall(SYS_connect, 0, &sa, len));
    show("bind(99)", syscall(SYS_bind, 99, &sa, len));
    show("listen(1)", syscall(SYS_listen, 1, 1));
    show("shutdown(2)", syscall(SYS_shutdown, 2, SHUT_RDWR));
    show("accept4(0,badflags)", syscall(SYS_accept4, 0, NULL, NULL, 1));
    show("accept4(0)", syscall(SYS_accept4, 0, NULL, NULL, SOCK_CLOEXEC));
    show("sendmsg(0,MSG_CMSG_COMPAT)", syscall(SYS_sendmsg, 0, NULL, 0x80000000));
    show("recvfrom(99)", syscall(SYS_recvfrom, 99, &v, 1, 0, NULL, NULL));
    show("socket(12345)", syscall(SYS_socket, 12345, SOCK_STREAM, 0));
    show("socket(-1)", syscall(SYS_socket, -1, SOCK_STREAM, 0));
    show("socket(INET,badflag)", syscall(SYS_socket, AF_INET, SOCK_STREAM | 0x40, 0));
    show("socket(INET,type 12)", syscall(SYS_socket, AF_INET, 12, 0));
    show("socket(UNIX)", syscall(SYS_socket, AF_UNIX, SOCK_STREAM, 0));
    show("socket(INET)", syscall(SYS_socket, AF_INET, SOCK_DGRAM, 0));
    show("socket(INET6)", syscall(SYS_socket, AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    show("socket(NETLINK)", syscall(SYS_socket, AF_NETLINK, SOCK_RAW, 0));
    show("socket(PACKET)", syscall(SYS_socket, AF_PACKET, SOCK_RAW, 0));
    show("socketpair(UNIX)", syscall(SYS_socketpair, AF_UNIX, SOCK_STREAM, 0, fds));
    return 0;
}
