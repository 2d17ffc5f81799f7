/* SPDX-License-Identifier: MIT */
/*
 * The object-less verbs of util.c: enum strings and rate conversions give exactly what
 * rdma-core 44 gives (compared value by value with the system library, loaded into its own
 * link namespace), kernel-struct marshalling matches it byte for byte, sysfs reading handles
 * newline, no newline and overflow, and the fork and import verbs answer as documented.
 */
#include "sr_test.h"

#include "verbs/abi.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* The system library, if installed; NULL means the comparisons are skipped. */
static void *sys_lib;

static void *sys_sym(const char *name)
{
	void *p = sys_lib ? dlsym(sys_lib, name) : NULL;

	if (sys_lib && !p)
		SR_FAIL("system libibverbs lacks %s", name);
	return p;
}

static void open_system_lib(void)
{
#ifdef __SANITIZE_ADDRESS__
	/* A second libc in a new namespace and ASan do not mix. */
	printf("note: ASan build, comparison with the system library skipped\n");
#else
	static const char *const paths[] = {
		"/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
		"/lib/x86_64-linux-gnu/libibverbs.so.1",
		"/usr/lib64/libibverbs.so.1",
	};

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && !sys_lib; i++)
		if (access(paths[i], R_OK) == 0)
			sys_lib = dlmopen(LM_ID_NEWLM, paths[i], RTLD_NOW | RTLD_LOCAL);
	if (!sys_lib)
		printf("note: no system libibverbs, comparisons skipped\n");
#endif
}

typedef const char *(*str_fn)(int);

/* Ours against rdma-core's for every value in [lo, hi] (the enum and a margin around it). */
static void compare_strings(const char *name, str_fn ours, int lo, int hi)
{
	str_fn theirs = (str_fn)sys_sym(name);

	for (int v = lo; v <= hi; v++) {
		const char *a = ours(v);

		CHECK(a != NULL);
		if (theirs && a && strcmp(a, theirs(v)) != 0)
			SR_FAIL("%s(%d): ours \"%s\", rdma-core \"%s\"", name, v, a, theirs(v));
	}
}

static void test_strings(void)
{
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success"));
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded"));
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), "Work Request Flushed Error"));
	CHECK(!strcmp(ibv_wc_status_str((enum ibv_wc_status)999), "unknown"));
	CHECK(!strcmp(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), "port active"));
	CHECK(!strcmp(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter"));
	CHECK(!strcmp(ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown"));
	CHECK(!strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active"));

	compare_strings("ibv_wc_status_str", (str_fn)ibv_wc_status_str, -3, 40);
	compare_strings("ibv_event_type_str", (str_fn)ibv_event_type_str, -3, 40);
	compare_strings("ibv_node_type_str", (str_fn)ibv_node_type_str, -3, 20);
	compare_strings("ibv_port_state_str", (str_fn)ibv_port_state_str, -3, 20);
}

typedef int (*int_fn)(int);

static void compare_ints(const char *name, int_fn ours, int lo, int hi, int step)
{
	int_fn theirs = (int_fn)sys_sym(name);

	if (!theirs)
		return;
	for (long v = lo; v <= hi; v += step)
		if (ours((int)v) != theirs((int)v))
			SR_FAIL("%s(%ld): ours %d, rdma-core %d", name, v, ours((int)v),
				theirs((int)v));
}

static void test_rates(void)
{
	CHECK_EQ(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
	CHECK_EQ(ibv_rate_to_mult(IBV_RATE_25_GBPS), -1);	/* not a multiple of 2.5 */
	CHECK_EQ(ibv_rate_to_mult(IBV_RATE_MAX), -1);
	CHECK_EQ(mult_to_ibv_rate(16), IBV_RATE_40_GBPS);
	CHECK_EQ(mult_to_ibv_rate(0), IBV_RATE_MAX);
	CHECK_EQ(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);
	CHECK_EQ(mbps_to_ibv_rate(425000), IBV_RATE_400_GBPS);
	CHECK_EQ(mbps_to_ibv_rate(100000), IBV_RATE_MAX);

	/* Round trips over every defined rate. */
	for (int r = IBV_RATE_2_5_GBPS; r <= IBV_RATE_1200_GBPS; r++) {
		int mult = ibv_rate_to_mult((enum ibv_rate)r);

		CHECK(ibv_rate_to_mbps((enum ibv_rate)r) > 0);
		CHECK_EQ(mbps_to_ibv_rate(ibv_rate_to_mbps((enum ibv_rate)r)), r);
		if (mult > 0)
			CHECK_EQ(mult_to_ibv_rate(mult), r);
	}

	compare_ints("ibv_rate_to_mult", (int_fn)ibv_rate_to_mult, -2, 40, 1);
	compare_ints("ibv_rate_to_mbps", (int_fn)ibv_rate_to_mbps, -2, 40, 1);
	compare_ints("mult_to_ibv_rate", (int_fn)mult_to_ibv_rate, -2, 600, 1);
	/* Every Mb/s value of the table sits on a multiple of 1, so scan densely near them. */
	compare_ints("mbps_to_ibv_rate", (int_fn)mbps_to_ibv_rate, 0, 1300000, 1);
}

/* Fills a buffer with a byte pattern that differs at every offset. */
static void pattern(void *p, size_t n, unsigned seed)
{
	unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(seed + i * 7);
}

static void test_marshall(void)
{
	struct ib_uverbs_qp_attr kqp;
	struct ibv_qp_attr ours, theirs;
	struct ibv_sa_path_rec rec, back, rec_theirs;
	struct ib_user_path_rec kp, kp_theirs;
	void (*sys_qp)(struct ibv_qp_attr *, struct ib_uverbs_qp_attr *) =
		(void (*)(struct ibv_qp_attr *, struct ib_uverbs_qp_attr *))
			sys_sym("ibv_copy_qp_attr_from_kern");
	void (*sys_to)(struct ib_user_path_rec *, struct ibv_sa_path_rec *) =
		(void (*)(struct ib_user_path_rec *, struct ibv_sa_path_rec *))
			sys_sym("ibv_copy_path_rec_to_kern");
	void (*sys_from)(struct ibv_sa_path_rec *, struct ib_user_path_rec *) =
		(void (*)(struct ibv_sa_path_rec *, struct ib_user_path_rec *))
			sys_sym("ibv_copy_path_rec_from_kern");

	/* QP attributes: same bytes as rdma-core, and untouched fields stay untouched. */
	pattern(&kqp, sizeof(kqp), 3);
	memset(&ours, 0xa5, sizeof(ours));
	ibv_copy_qp_attr_from_kern(&ours, &kqp);
	CHECK_EQ(ours.qp_state, 0xa5a5a5a5u);
	CHECK_EQ(ours.qkey, kqp.qkey);
	CHECK_EQ(ours.ah_attr.dlid, kqp.ah_attr.dlid);
	CHECK(!memcmp(ours.alt_ah_attr.grh.dgid.raw, kqp.alt_ah_attr.grh.dgid, 16));
	CHECK_EQ(ours.alt_timeout, kqp.alt_timeout);
	if (sys_qp) {
		memset(&theirs, 0xa5, sizeof(theirs));
		sys_qp(&theirs, &kqp);
		CHECK(!memcmp(&ours, &theirs, sizeof(ours)));
	}

	/* Path records: to_kern then from_kern gives back every field. */
	memset(&rec, 0, sizeof(rec));
	pattern(rec.dgid.raw, 16, 1);
	pattern(rec.sgid.raw, 16, 2);
	rec.dlid = 0x1234;
	rec.slid = 0x5678;
	rec.raw_traffic = 1;
	rec.flow_label = 0xabcdef;
	rec.hop_limit = 64;
	rec.traffic_class = 3;
	rec.reversible = 1;
	rec.numb_path = 2;
	rec.pkey = 0xffff;
	rec.sl = 5;
	rec.mtu_selector = 2;
	rec.mtu = IBV_MTU_4096;
	rec.rate_selector = 2;
	rec.rate = IBV_RATE_100_GBPS;
	rec.packet_life_time_selector = 2;
	rec.packet_life_time = 18;
	rec.preference = 1;
	memset(&kp, 0, sizeof(kp));
	ibv_copy_path_rec_to_kern(&kp, &rec);
	memset(&back, 0, sizeof(back));
	ibv_copy_path_rec_from_kern(&back, &kp);
	CHECK(!memcmp(&rec, &back, sizeof(rec)));
	if (sys_to && sys_from) {
		memset(&kp_theirs, 0, sizeof(kp_theirs));
		sys_to(&kp_theirs, &rec);
		CHECK(!memcmp(&kp, &kp_theirs, sizeof(kp)));
		memset(&rec_theirs, 0, sizeof(rec_theirs));
		sys_from(&rec_theirs, &kp);
		CHECK(!memcmp(&back, &rec_theirs, sizeof(back)));
	}
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(fd >= 0);
	REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
}

static void test_sysfs(void)
{
	char dir[] = "/tmp/sr_test_util.XXXXXX";
	char buf[8];
	pid_t pid;
	int status;

	REQUIRE(mkdtemp(dir));
	write_file(dir, "nl", "hello\n");
	write_file(dir, "bare", "abc");
	write_file(dir, "full", "12345678");	/* fills buf, nothing to overwrite with NUL */
	write_file(dir, "fullnl", "1234567\n");

	CHECK_EQ(ibv_read_sysfs_file(dir, "nl", buf, sizeof(buf)), 5);
	CHECK(!strcmp(buf, "hello"));
	CHECK_EQ(ibv_read_sysfs_file(dir, "bare", buf, sizeof(buf)), 3);
	CHECK(!strcmp(buf, "abc"));
	CHECK_EQ(ibv_read_sysfs_file(dir, "full", buf, sizeof(buf)), -1);
	CHECK_EQ(ibv_read_sysfs_file(dir, "fullnl", buf, sizeof(buf)), 7);
	CHECK(!strcmp(buf, "1234567"));
	errno = 0;
	CHECK_EQ(ibv_read_sysfs_file(dir, "absent", buf, sizeof(buf)), -1);
	CHECK_EQ(errno, ENOENT);

	/* The path is computed once per process, so each case runs in a child. */
	pid = fork();
	if (pid == 0) {
		unsetenv("SYSFS_PATH");
		_exit(strcmp(ibv_get_sysfs_path(), "/sys") != 0);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	pid = fork();
	if (pid == 0) {
		setenv("SYSFS_PATH", "/tmp/fake_sys//", 1);
		_exit(strcmp(ibv_get_sysfs_path(), "/tmp/fake_sys") != 0);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	for (const char *f = "nl\0bare\0full\0fullnl\0"; *f; f += strlen(f) + 1) {
		char path[512];

		snprintf(path, sizeof(path), "%s/%s", dir, f);
		unlink(path);
	}
	rmdir(dir);
}

static void test_fork_and_import(void)
{
	CHECK_EQ(ibv_fork_init(), 0);
	CHECK_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
	CHECK_EQ(ibv_dontfork_range(&sys_lib, sizeof(sys_lib)), 0);
	CHECK_EQ(ibv_dofork_range(&sys_lib, sizeof(sys_lib)), 0);

	errno = 0;
	CHECK(ibv_import_device(3) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	errno = 0;
	CHECK(ibv_import_pd(NULL, 1) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	errno = 0;
	CHECK(ibv_import_mr(NULL, 1) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	errno = 0;
	CHECK(ibv_import_dm(NULL, 1) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	errno = 0;
	CHECK(ibv_reg_dmabuf_mr(NULL, 0, 4096, 0, -1, 0) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	ibv_unimport_pd(NULL);
	ibv_unimport_mr(NULL);
	ibv_unimport_dm(NULL);
}

int main(void)
{
	sr_test_timeout(60);
	open_system_lib();
	test_strings();
	test_rates();
	test_marshall();
	test_sysfs();
	test_fork_and_import();
	return sr_test_done("test_util");
}
