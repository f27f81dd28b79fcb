/*
 * consumer.c - a program that uses an installed libtsdf exactly as its
 * headers say, built by tests/test_install_consumer.sh against the install
 * tree through pkg-config and through find_package(tsdf), shared and static.
 *
 * It needs no daemon: a lazy client dials in the background, so opening it
 * towards an ipc:// address where nothing listens succeeds, and a request
 * then times out. What it checks is that every call the headers offer a
 * client (the client calls, the mesh helpers, the error table, the
 * intrinsics and pose checks) links and behaves.
 */
#include <stdio.h>
#include <string.h>

#include <tsdf_client.h>
#include <tsdf_pose.h>

static int failures;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "consumer: FAILED: %s\n", what);
        failures++;
    }
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "ipc:///nonexistent/tsdf-consumer.sock";

    tsdf_client_options opts;
    tsdf_client_options_default(&opts);
    opts.lazy_connect = 1;
    tsdf_client *c = NULL;
    int rc = tsdf_client_open(url, NULL, &opts, &c);
    check(rc == TSDF_OK && c != NULL, "tsdf_client_open (lazy) succeeds");
    if (c != NULL) {
        tsdf_rep_ping ping;
        rc = tsdf_client_ping(c, &ping, 50);
        check(rc == TSDF_ETIMEOUT, "tsdf_client_ping to nobody times out");
        tsdf_client_close(c);
    }

    tsdf_mesh m;
    tsdf_mesh_init(&m);
    check(m.vertex_count == 0 && m.positions == NULL, "tsdf_mesh_init zeroes the mesh");
    tsdf_mesh_fini(&m);
    tsdf_client_mesh_release(&m);

    check(strcmp(tsdf_errname(TSDF_ETIMEOUT), "TIMEOUT") == 0, "tsdf_errname");
    check(strlen(tsdf_strerror(TSDF_EINVAL)) > 0, "tsdf_strerror");

    tsdf_intrinsics K = {525.0f, 525.0f, 319.5f, 239.5f};
    check(tsdf_intrinsics_check(&K, 640, 480) == TSDF_OK, "tsdf_intrinsics_check");
    float T[16];
    tsdf_pose_identity(T);
    check(tsdf_pose_is_rigid(T) == 1, "tsdf_pose_is_rigid");

    if (failures == 0)
        printf("consumer: ok\n");
    return failures == 0 ? 0 : 1;
}
