/* SPDX-License-Identifier: MIT */
/*
 * The device view of `softrdma run` (docs/view.md): before it executes the program, `run`
 * gives it a private mount namespace (in a private user namespace when not root) in which the
 * soft NICs appear where RDMA middleware looks for a device:
 *
 *   /dev/infiniband/uverbsN, rdma_cm     character devices it can open (each is /dev/null)
 *   /sys/class/infiniband/softrdmaN/     node_type, node_guid, ports/1/{state, gids/0,
 *                                        gid_attrs/types/0 "RoCE v2", gid_attrs/ndevs/0, ...},
 *                                        device/{numa_node, local_cpus, net/IF}
 *   /sys/class/infiniband_verbs/uverbsN/ ibdev, abi_version, dev
 *
 * The values come from the verbs API (the same answers ibv_query_* gives the program).
 * /dev and /sys/class are read-only to an ordinary user, so where /dev/infiniband or
 * /sys/class/infiniband do not exist, a tmpfs covers /dev (or /sys/class) and every entry of
 * the original is bound back into it. Nothing is mounted outside the new namespace: mount
 * events do not propagate out of it (MS_PRIVATE), and the namespace dies with its last process.
 */
#include "cli.h"
#include "core/param.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Writes the formatted text to path (created 0644: the library rewrites some, see below). */
static int put(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put(const char *path, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int fd, n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	if (write(fd, buf, n) != n) {
		close(fd);
		return -1;
	}
	return close(fd);
}

static int mkdirs(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int mkdirs(const char *fmt, ...)
{
	char path[PATH_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(path, 0755) && errno != EEXIST ? -1 : 0;
}

static int write_uid_map(const char *file, const char *line)
{
	int fd = open(file, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, line, strlen(line));
	close(fd);
	return n == (ssize_t)strlen(line) ? 0 : -1;
}

/* A private mount namespace; as an ordinary user inside a user namespace that maps only our
 * own uid and gid (the program keeps its ids; see docs/view.md for what else it sees). */
static int view_unshare(void)
{
	uid_t uid = geteuid();
	gid_t gid = getegid();
	char line[64];

	if (uid == 0) {
		if (unshare(CLONE_NEWNS))
			return -1;
	} else {
		if (unshare(CLONE_NEWUSER | CLONE_NEWNS))
			return -1;
		if (write_uid_map("/proc/self/setgroups", "deny") && errno != ENOENT)
			return -1;
		snprintf(line, sizeof(line), "%u %u 1\n", uid, uid);
		if (write_uid_map("/proc/self/uid_map", line))
			return -1;
		snprintf(line, sizeof(line), "%u %u 1\n", gid, gid);
		if (write_uid_map("/proc/self/gid_map", line))
			return -1;
	}
	/* Nothing mounted from here on may propagate to the namespace we came from. */
	return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
}

/*
 * Covers dir (a directory we cannot write) with a tmpfs holding every entry it had: each
 * directory, file and device node bound back from the original (directories with their
 * submounts), each symbolic link copied. Relative links keep working: a bound directory's
 * ".." is the directory it is mounted in.
 */
static int cover(const char *dir)
{
	char src[PATH_MAX], dst[PATH_MAX], link[PATH_MAX];
	struct dirent *e;
	struct stat st;
	int old, fd;
	DIR *d;

	old = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (old < 0)
		return -1;
	if (fstat(old, &st) ||
	    mount("softrdma-view", dir, "tmpfs", MS_NOSUID, "mode=0755,size=1m")) {
		close(old);
		return -1;
	}
	d = fdopendir(dup(old));
	if (!d) {
		close(old);
		return -1;
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(old, e->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;	/* gone meanwhile */
		snprintf(src, sizeof(src), "/proc/self/fd/%d/%s", old, e->d_name);
		snprintf(dst, sizeof(dst), "%s/%s", dir, e->d_name);
		if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlinkat(old, e->d_name, link, sizeof(link) - 1);

			if (n < 0)
				continue;
			link[n] = '\0';
			if (symlink(link, dst))
				goto fail;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			if (mkdir(dst, st.st_mode & 07777))
				goto fail;
		} else {
			fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
			if (fd < 0)
				goto fail;
			close(fd);
		}
		if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL))
			goto fail;
	}
	closedir(d);
	close(old);
	return 0;
fail:
	fprintf(stderr, "softrdma run: view: %s: %s\n", dst, strerror(errno));
	closedir(d);
	close(old);
	return -1;
}

/* A writable directory at path: a tmpfs over it when it exists (hiding what was there, e.g. a
 * host's real RDMA devices: the program's libibverbs is softrdma's and lists only its own);
 * else created in a tmpfs that covers its parent. */
static int fresh_dir(const char *parent, const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", parent, name);
	if (stat(path, &st) && cover(parent))
		return -1;
	if (!stat(path, &st))
		return mount("softrdma-view", path, "tmpfs", MS_NOSUID, "mode=0755,size=1m");
	return mkdir(path, 0755);
}

/* The interface holding addr (an exact match, else the interface whose subnet has it: every
 * 127.x.y.z is on lo). */
static void netdev_of(const struct ibv_gid_entry *g, char *name, size_t size)
{
	struct ifaddrs *ifa, *i;
	const uint8_t *b = g->gid.raw;
	bool v4 = !memcmp(b, "\0\0\0\0\0\0\0\0", 8) && b[10] == 0xff && b[11] == 0xff;
	const char *best = NULL;

	snprintf(name, size, "lo");
	if (getifaddrs(&ifa))
		return;
	for (i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (v4 && i->ifa_addr->sa_family == AF_INET && i->ifa_netmask) {
			uint32_t a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
			uint32_t m = ((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr;
			uint32_t want;

			memcpy(&want, b + 12, 4);
			if (a == want) {
				best = i->ifa_name;
				break;
			}
			if (!best && (a & m) == (want & m))
				best = i->ifa_name;
		} else if (!v4 && i->ifa_addr->sa_family == AF_INET6 &&
			   !memcmp(((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr.s6_addr, b, 16)) {
			best = i->ifa_name;
			break;
		}
	}
	if (best)
		snprintf(name, size, "%s", best);
	freeifaddrs(ifa);
}

static void gid_text(const uint8_t g[16], char *buf, size_t size)
{
	snprintf(buf, size, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
		 g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12],
		 g[13], g[14], g[15]);
}

/* sysfs's cpumask format: 32-bit hex words, most significant first, comma-separated. */
static void cpu_mask(char *buf, size_t size)
{
	long n = sysconf(_SC_NPROCESSORS_CONF);
	size_t used = 0;

	if (n < 1)
		n = 1;
	for (long w = (n - 1) / 32; w >= 0 && used < size; w--) {
		long bits = n - w * 32 > 32 ? 32 : n - w * 32;
		uint32_t v = bits == 32 ? 0xffffffffu : (1u << bits) - 1;

		used += snprintf(buf + used, size - used, w == (n - 1) / 32 ? "%x" : ",%08x", v);
	}
}

static const char *const port_state_name[] = { "NOP", "DOWN", "INIT", "ARMED", "ACTIVE",
					       "ACTIVE_DEFER" };

static int view_port(const char *dev, struct ibv_context *ctx, uint8_t port, char *ifname,
		     size_t ifsize)
{
	struct ibv_port_attr pa;
	char d[PATH_MAX], f[PATH_MAX + 64], gid[64];
	int width;

	if (ibv_query_port(ctx, port, &pa))
		return -1;
	snprintf(d, PATH_MAX - 64, "/sys/class/infiniband/%s/ports/%u", dev, port);
	if (mkdirs("%s/gids", d) || mkdirs("%s/gid_attrs/types", d) ||
	    mkdirs("%s/gid_attrs/ndevs", d) || mkdirs("%s/pkeys", d))
		return -1;
#define PUT(name, ...) do { snprintf(f, sizeof(f), "%s/%s", d, name); \
		if (put(f, __VA_ARGS__)) return -1; } while (0)
	PUT("state", "%d: %s\n", pa.state,
	    pa.state < sizeof(port_state_name) / sizeof(port_state_name[0]) ?
		    port_state_name[pa.state] : "UNKNOWN");
	PUT("phys_state", "%s\n", pa.phys_state == 5 ? "5: LinkUp" : "3: Disabled");
	PUT("link_layer", "%s\n", pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" :
	    "InfiniBand");
	PUT("lid", "0x%x\n", pa.lid);
	PUT("sm_lid", "0x%x\n", pa.sm_lid);
	PUT("lid_mask_count", "%u\n", pa.lmc);
	PUT("sm_sl", "%u\n", pa.sm_sl);
	PUT("cap_mask", "0x%08x\n", pa.port_cap_flags);
	width = pa.active_width == 1 ? 1 : pa.active_width == 2 ? 4 : pa.active_width == 4 ? 8 : 12;
	/* active_speed 32 is EDR (25 Gb/s a lane); anything else is shown as what rxe shows. */
	PUT("rate", "%d Gb/sec (%dX EDR)\n", 25 * width, width);
	for (int i = 0; i < pa.pkey_tbl_len; i++) {
		uint16_t pkey;
		char name[32];

		if (ibv_query_pkey(ctx, port, i, &pkey))
			return -1;
		snprintf(name, sizeof(name), "pkeys/%d", i);
		PUT(name, "0x%04x\n", ntohs(pkey));
	}
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		char name[48];

		memset(&e, 0, sizeof(e));
		if (ibv_query_gid_ex(ctx, port, i, &e, 0)) {
			/* An empty entry: zeros, and no type or net device, as the kernel shows. */
			union ibv_gid g;

			if (ibv_query_gid(ctx, port, i, &g))
				memset(&g, 0, sizeof(g));
			gid_text(g.raw, gid, sizeof(gid));
			snprintf(name, sizeof(name), "gids/%d", i);
			PUT(name, "%s\n", gid);
			continue;
		}
		gid_text(e.gid.raw, gid, sizeof(gid));
		snprintf(name, sizeof(name), "gids/%d", i);
		PUT(name, "%s\n", gid);
		snprintf(name, sizeof(name), "gid_attrs/types/%d", i);
		PUT(name, "%s\n", e.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" :
		    e.gid_type == IBV_GID_TYPE_ROCE_V1 ? "IB/RoCE v1" : "IB/RoCE v1");
		netdev_of(&e, ifname, ifsize);
		snprintf(name, sizeof(name), "gid_attrs/ndevs/%d", i);
		PUT(name, "%s\n", ifname);
	}
#undef PUT
	return 0;
}

static int view_device(struct ibv_device *ibdev, int index)
{
	const char *dev = ibv_get_device_name(ibdev);
	char d[PATH_MAX], f[PATH_MAX + 64], guid[32], mask[256], ifname[IF_NAMESIZE + 1] = "lo";
	struct ibv_device_attr a;
	struct ibv_context *ctx;
	uint64_t g;
	int rc = -1;

	ctx = ibv_open_device(ibdev);
	if (!ctx)
		return -1;
	if (ibv_query_device(ctx, &a))
		goto out;
	snprintf(d, sizeof(d), "/sys/class/infiniband/%s", dev);
	if (mkdirs("%s/device/net", d))
		goto out;
#define PUT(name, ...) do { snprintf(f, sizeof(f), "%s/%s", d, name); \
		if (put(f, __VA_ARGS__)) goto out; } while (0)
	g = be64toh(a.node_guid);
	snprintf(guid, sizeof(guid), "%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff,
		 (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
	PUT("node_type", "1: CA\n");
	PUT("node_guid", "%s\n", guid);
	g = be64toh(a.sys_image_guid);
	PUT("sys_image_guid", "%04x:%04x:%04x:%04x\n", (unsigned)(g >> 48) & 0xffff,
	    (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
	PUT("fw_ver", "%s\n", a.fw_ver);
	PUT("hw_rev", "0x%x\n", a.hw_ver);
	PUT("hca_type", "softrdma\n");
	PUT("node_desc", "%s softrdma\n", dev);
	PUT("board_id", "softrdma\n");
	/* A software device has no NUMA affinity and may run on any CPU. */
	PUT("device/numa_node", "-1\n");
	cpu_mask(mask, sizeof(mask));
	PUT("device/local_cpus", "%s\n", mask);
	PUT("device/vendor", "0x%04x\n", a.vendor_id);
	PUT("device/device", "0x%04x\n", a.vendor_part_id);
	for (uint8_t p = 1; p <= a.phys_port_cnt; p++)
		if (view_port(dev, ctx, p, ifname, sizeof(ifname)))
			goto out;
	/* device/net/IF: the port's network interface, as for a PCI NIC's function. */
	snprintf(f, sizeof(f), "%s/device/net/%s", d, ifname);
	snprintf(mask, sizeof(mask), "/sys/class/net/%s", ifname);
	if (symlink(mask, f))
		goto out;

	snprintf(d, sizeof(d), "/sys/class/infiniband_verbs/uverbs%d", index);
	if (mkdirs("%s", d))
		goto out;
	PUT("ibdev", "%s\n", dev);
	PUT("abi_version", "1\n");
	PUT("dev", "231:%d\n", 192 + index);
	snprintf(f, sizeof(f), "%s/device", d);
	snprintf(mask, sizeof(mask), "/sys/class/infiniband/%s/device", dev);
	if (symlink(mask, f))
		goto out;
	snprintf(f, sizeof(f), "/dev/infiniband/uverbs%d", index);
	if (put(f, "%s", "") || mount("/dev/null", f, NULL, MS_BIND, NULL))
		goto out;
#undef PUT
	rc = 0;
out:
	ibv_close_device(ctx);
	return rc;
}

/*
 * The devices the view opens live in this process only until it executes the program: they
 * must leave no trace of their own. A capture (pcap) or a counter dump (stats_dump) that the
 * user asked for is the program's, so both are hidden from the library while the view reads
 * the devices and put back before the program starts (the library reads its parameters
 * afresh in the executed program). Without this, `-o pcap=%p.pcap` got an empty capture per
 * `run` besides the program's own, which `softrdma pcap` rightly refused (the demo failed).
 */
static const char *const view_hidden[] = { "pcap", "stats_dump" };

static int view_devices(void);

int view_enter(void)
{
	char env[sizeof(view_hidden) / sizeof(view_hidden[0])][80];
	char *saved[sizeof(view_hidden) / sizeof(view_hidden[0])];
	size_t k, nh = sizeof(view_hidden) / sizeof(view_hidden[0]);
	int rc;

	for (k = 0; k < nh; k++) {
		const char *v;

		sr_param_env_name(sr_param_find(view_hidden[k]), env[k], sizeof(env[k]));
		v = getenv(env[k]);
		saved[k] = v ? strdup(v) : NULL;
		unsetenv(env[k]);
	}
	rc = view_devices();
	for (k = 0; k < nh; k++) {
		if (saved[k])
			setenv(env[k], saved[k], 1);
		free(saved[k]);
	}
	return rc;
}

static int view_devices(void)
{
	struct ibv_device **list;
	int n, rc = -1;

	if (view_unshare()) {
		fprintf(stderr, "softrdma run: no device view (a private %snamespace is not allowed "
			"here: %s); running without it\n", geteuid() ? "user and mount " : "mount ",
			strerror(errno));
		return 1;
	}
	if (fresh_dir("/dev", "infiniband") || fresh_dir("/sys/class", "infiniband") ||
	    fresh_dir("/sys/class", "infiniband_verbs")) {
		fprintf(stderr, "softrdma run: view: cannot make the device directories: %s\n",
			strerror(errno));
		return -1;
	}
	if (put("/sys/class/infiniband_verbs/abi_version", "6\n"))
		return -1;
	/* From here the library keeps its part of the view, in this process as in the program's
	 * (engine/nic.c): closing the device this process opens takes away the port GID and LID
	 * it wrote, which no one holds once it is closed. */
	setenv("SOFTRDMA_VIEW", "1", 1);
	list = ibv_get_device_list(&n);
	if (!list) {
		fprintf(stderr, "softrdma run: view: no devices: %s\n", strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++)
		if (view_device(list[i], i)) {
			fprintf(stderr, "softrdma run: view: %s: %s\n",
				ibv_get_device_name(list[i]), strerror(errno));
			goto out;
		}
	if (put("/dev/infiniband/rdma_cm", "%s", "") ||
	    mount("/dev/null", "/dev/infiniband/rdma_cm", NULL, MS_BIND, NULL))
		goto out;
	rc = 0;
out:
	ibv_free_device_list(list);
	return rc;
}
