/*
 * test_daemon_results.c - end to end, the daemon's results equal the
 * engine's: the same frames integrated by a real tsdfd (over libtsdf) and
 * by a volume in the test (both on the CPU backend unless
 * TSDF_TEST_DAEMON_BACKEND=cuda) give the same mesh, incremental mesh and
 * raycast; save/reset/load round-trips the map, and paths that leave the
 * state directory are refused.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_mesh_and_raycast_match_engine(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    tsdf_volume *vol = NULL;
    tsdf_volume_params p;
    (void)state;

    frames_make(&fs, "sphere", 160, 120, 16);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    tsdf_client *c = open_client(&h, 0);

    tsdf_volume_params_default(&p);
    p.backend = test_backend();
    assert_int_equal(tsdf_volume_create(&p, &vol), TSDF_OK);
    uint64_t last_version = 0;
    for (uint32_t i = 0; i < fs.count; i++) {
        tsdf_client_frame f;
        tsdf_rep_integrate rep;
        memset(&f, 0, sizeof f);
        f.map = "site1";
        f.sensor_id = 3;
        f.seq = i;
        f.frame = &fs.frames[i];
        assert_int_equal(tsdf_client_integrate(c, &f, 60000, &rep), TSDF_OK);
        assert_int_equal(rep.seq, i);
        assert_true(rep.version > last_version);
        last_version = rep.version;
        assert_int_equal(tsdf_volume_integrate(vol, &fs.frames[i]), TSDF_OK);
    }
    tsdf_volume_stats vs;
    assert_int_equal(tsdf_volume_get_stats(vol, &vs), TSDF_OK);
    assert_int_equal(last_version, vs.version);

    /* A new map was made on first use, next to the declared default. */
    tsdf_rep_maps maps;
    assert_int_equal(tsdf_client_maps(c, &maps, 10000), TSDF_OK);
    assert_int_equal(maps.count, 2);
    assert_string_equal(maps.names[0], "default");
    assert_string_equal(maps.names[1], "site1");

    /* Mesh. */
    tsdf_mesh dm, em;
    uint64_t mesh_version = 0;
    tsdf_mesh_init(&dm);
    tsdf_mesh_init(&em);
    assert_int_equal(tsdf_client_mesh(c, "site1", NULL, &dm, &mesh_version, 60000), TSDF_OK);
    assert_int_equal(tsdf_volume_mesh(vol, NULL, &em), TSDF_OK);
    assert_int_equal(mesh_version, vs.version);
    assert_true(em.triangle_count > 100);
    assert_int_equal(dm.vertex_count, em.vertex_count);
    assert_int_equal(dm.triangle_count, em.triangle_count);
    if (test_backend() == TSDF_BACKEND_CUDA) {
        /* The GPU allocates blocks in a thread-dependent order, so compare
         * the vertices as sets. */
        sort_vertices(dm.positions, dm.vertex_count);
        sort_vertices(em.positions, em.vertex_count);
    }
    for (size_t i = 0; i < 3 * em.vertex_count; i++)
        if (fabsf(dm.positions[i] - em.positions[i]) > 1e-6f)
            fail_msg("vertex coordinate %zu: daemon %.9g, engine %.9g", i, dm.positions[i],
                     em.positions[i]);
    if (test_backend() == TSDF_BACKEND_CPU)
        assert_memory_equal(dm.indices, em.indices, 3 * em.triangle_count * sizeof(uint32_t));
    tsdf_client_mesh_release(&dm);

    /* Incremental: nothing changed after the current version. */
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.since_version = mesh_version;
    assert_int_equal(tsdf_client_mesh(c, "site1", &mp, &dm, NULL, 60000), TSDF_OK);
    assert_int_equal(dm.triangle_count, 0);
    tsdf_client_mesh_release(&dm);

    /* Raycast from a pose of the sequence. */
    tsdf_raycast_params rp;
    memset(&rp, 0, sizeof rp);
    rp.width = fs.seq.width;
    rp.height = fs.seq.height;
    rp.K = fs.seq.K;
    memcpy(rp.T_world_cam, fs.frames[3].T_world_cam, sizeof rp.T_world_cam);
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = 5.0f;
    size_t px = (size_t)rp.width * rp.height;
    float *dd = malloc(px * sizeof(float)), *ed = malloc(px * sizeof(float));
    float *dn = malloc(3 * px * sizeof(float)), *en = malloc(3 * px * sizeof(float));
    assert_non_null(dd);
    assert_non_null(ed);
    assert_non_null(dn);
    assert_non_null(en);
    tsdf_raycast_output dout = {dd, dn, NULL}, eout = {ed, en, NULL};
    assert_int_equal(tsdf_client_raycast(c, "site1", &rp, 0, &dout, NULL, 60000), TSDF_OK);
    assert_int_equal(tsdf_volume_raycast(vol, &rp, &eout), TSDF_OK);
    size_t hits = 0;
    for (size_t i = 0; i < px; i++) {
        if (isnan(ed[i])) {
            assert_true(isnan(dd[i]));
            continue;
        }
        hits++;
        if (fabsf(dd[i] - ed[i]) > 1e-6f)
            fail_msg("pixel %zu: daemon depth %.9g, engine %.9g", i, dd[i], ed[i]);
        for (int k = 0; k < 3; k++)
            assert_true(fabsf(dn[3 * i + k] - en[3 * i + k]) <= 1e-6f);
    }
    assert_true(hits > px / 20);

    /* Save, reset, load: the map comes back as it was. */
    tsdf_rep_path sp, lp;
    assert_int_equal(tsdf_client_save(c, "site1", NULL, &sp, 60000), TSDF_OK);
    assert_non_null(strstr(sp.path, h.state_dir));
    assert_int_equal(access(sp.path, R_OK), 0);
    assert_int_equal(tsdf_client_reset(c, "site1", 10000), TSDF_OK);
    assert_int_equal(tsdf_client_mesh(c, "site1", NULL, &dm, NULL, 60000), TSDF_OK);
    assert_int_equal(dm.vertex_count, 0);
    tsdf_client_mesh_release(&dm);
    assert_int_equal(tsdf_client_load(c, "site1", NULL, &lp, 60000), TSDF_OK);
    assert_string_equal(lp.path, sp.path);
    assert_int_equal(tsdf_client_mesh(c, "site1", NULL, &dm, NULL, 60000), TSDF_OK);
    assert_int_equal(dm.vertex_count, em.vertex_count);
    assert_int_equal(dm.triangle_count, em.triangle_count);
    if (test_backend() == TSDF_BACKEND_CUDA)
        sort_vertices(dm.positions, dm.vertex_count);
    for (size_t i = 0; i < 3 * em.vertex_count; i++)
        assert_true(fabsf(dm.positions[i] - em.positions[i]) <= 1e-6f);
    tsdf_client_mesh_release(&dm);
    /* Paths outside the state dir are refused. */
    assert_int_equal(tsdf_client_save(c, "site1", "/etc/tsdfd-evil.snap", NULL, 10000),
                     TSDF_EINVAL);
    assert_int_equal(tsdf_client_load(c, "site1", "../x.snap", NULL, 10000), TSDF_EINVAL);
    /* So are paths that leave it through a symbolic link planted inside. */
    {
        char link[TSDFD_HARNESS_PATH_LEN + 32];
        snprintf(link, sizeof link, "%s/escape", h.state_dir);
        assert_int_equal(symlink("/tmp", link), 0);
        assert_int_equal(tsdf_client_save(c, "site1", "escape/evil.snap", NULL, 10000),
                         TSDF_EINVAL);
        assert_int_equal(tsdf_client_load(c, "site1", "escape/evil.snap", NULL, 10000),
                         TSDF_EINVAL);
        assert_int_equal(unlink(link), 0);
    }
    /* An explicit file inside it works both ways. */
    char file[TSDFD_HARNESS_PATH_LEN + 32];
    snprintf(file, sizeof file, "%s/explicit.snap", h.state_dir);
    assert_int_equal(tsdf_client_save(c, "site1", file, &sp, 60000), TSDF_OK);
    assert_string_equal(sp.path, file);
    assert_int_equal(tsdf_client_load(c, "site1", "explicit.snap", &lp, 60000), TSDF_OK);

    tsdf_mesh_fini(&em);
    free(dd);
    free(ed);
    free(dn);
    free(en);
    tsdf_volume_destroy(vol);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_and_raycast_match_engine),
    };
    return daemon_tests_run("daemon_results", tests, sizeof tests / sizeof tests[0]);
}
