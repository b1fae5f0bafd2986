// SPDX-License-Identifier: GPL-2.0
/* malloc_sizes: a libbpf tool.  Runs COMMAND, counts its malloc() calls per size class
 * (a hash map) and prints every free()'s address as the ring buffer delivers it.
 *
 *   malloc_sizes OBJECT LIBRARY COMMAND [ARGS...]
 *
 * OBJECT is malloc_sizes.bpf.o, LIBRARY the file malloc and free are probed in (the libc
 * COMMAND maps, or COMMAND itself when it is static).  The child waits on a pipe until
 * the probes are attached, then turns address randomization off and runs COMMAND, so its
 * heap addresses are the same on every run. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/wait.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

struct free_event {
	unsigned int pid;
	unsigned int seq;
	unsigned long long addr;
};

static pid_t child;

static int on_free(void *ctx, void *data, size_t size)
{
	const struct free_event *e = data;

	(void)ctx;
	if (size != sizeof(*e)) {
		fprintf(stderr, "malloc_sizes: record of %zu bytes\n", size);
		return -1;
	}
	printf("free #%u %s addr=0x%llx\n", e->seq, e->pid == (unsigned int)child ? "child" : "other", e->addr);
	return 0;
}

static struct bpf_link *attach(struct bpf_object *obj, const char *prog_name, const char *lib, const char *func)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = func, .retprobe = false);
	struct bpf_program *prog = bpf_object__find_program_by_name(obj, prog_name);
	struct bpf_link *link;

	if (!prog) {
		fprintf(stderr, "malloc_sizes: no program %s\n", prog_name);
		return NULL;
	}
	link = bpf_program__attach_uprobe_opts(prog, child, lib, 0, &opts);
	if (!link)
		fprintf(stderr, "malloc_sizes: attaching %s to %s:%s: %s\n", prog_name, lib, func, strerror(errno));
	return link;
}

int main(int argc, char **argv)
{
	struct bpf_object *obj;
	struct bpf_map *map, *sizes, *frees;
	struct ring_buffer *rb;
	int go[2], status = 0, err, done = 0;
	char c = 0;

	if (argc < 4) {
		fprintf(stderr, "usage: malloc_sizes OBJECT LIBRARY COMMAND [ARGS...]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (pipe(go))
		return 1;
	child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(127);
		personality(ADDR_NO_RANDOMIZE);
		execvp(argv[3], argv + 3);
		perror("exec");
		_exit(127);
	}
	close(go[0]);

	obj = bpf_object__open_file(argv[1], NULL);
	if (!obj) {
		fprintf(stderr, "malloc_sizes: opening %s: %s\n", argv[1], strerror(errno));
		goto fail;
	}
	bpf_object__for_each_map(map, obj) {
		size_t sz;
		const char *name = bpf_map__name(map);
		size_t len = strlen(name);
		if (len > 7 && !strcmp(name + len - 7, ".rodata")) {
			unsigned int *tgid = (unsigned int *)bpf_map__initial_value(map, &sz);
			if (tgid && sz >= sizeof(*tgid))
				*tgid = child;
		}
	}
	err = bpf_object__load(obj);
	if (err) {
		fprintf(stderr, "malloc_sizes: loading: %s\n", strerror(-err));
		goto fail;
	}
	if (!attach(obj, "on_malloc", argv[2], "malloc") || !attach(obj, "on_free", argv[2], "free"))
		goto fail;
	sizes = bpf_object__find_map_by_name(obj, "sizes");
	frees = bpf_object__find_map_by_name(obj, "frees");
	rb = ring_buffer__new(bpf_map__fd(frees), on_free, NULL, NULL);
	if (!rb) {
		fprintf(stderr, "malloc_sizes: ring buffer: %s\n", strerror(errno));
		goto fail;
	}
	if (write(go[1], &c, 1) != 1)
		goto fail;
	close(go[1]);
	while (!done) {
		if (ring_buffer__poll(rb, 50) < 0)
			break;
		if (waitpid(child, &status, WNOHANG) == child)
			done = 1;
	}
	ring_buffer__consume(rb);
	printf("exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	{
		unsigned int key, next, *prev = NULL;
		unsigned long long count;
		unsigned long long counts[64] = {0};
		while (bpf_map_get_next_key(bpf_map__fd(sizes), prev, &next) == 0) {
			if (bpf_map_lookup_elem(bpf_map__fd(sizes), &next, &count) == 0 && next < 64)
				counts[next] = count;
			key = next;
			prev = &key;
		}
		for (key = 0; key < 64; key++)
			if (counts[key])
				printf("class %2u [%llu, %llu): %llu\n", key, key ? 1ULL << (key - 1) : 0ULL,
				       1ULL << key, counts[key]);
	}
	ring_buffer__free(rb);
	bpf_object__close(obj);
	return 0;
fail:
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return 1;
}
