/*
 * tsdf_proto_types.h - the plain types of the wire format that libtsdf's
 * API hands out: the protocol's limits and default addresses, the depth
 * encodings a frame may travel in, and the replies that the client calls
 * fill (integrate, stats, save/load, maps, ping).
 *
 * Split from tsdf_proto.h so that libtsdf can install them without the
 * codec's functions, which it compiles in but does not export: an
 * installed header declares only what the library provides. tsdf_proto.h
 * includes this header; see it for the format's rules.
 */
#ifndef TSDF_PROTO_TYPES_H
#define TSDF_PROTO_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- limits and defaults ------------------------------------------------ */

#define TSDF_PROTO_VERSION 1
/* The largest message either side encodes or accepts, in bytes. */
#define TSDF_PROTO_MAX_MESSAGE_BYTES (64u * 1024u * 1024u)
/* Map names: 1..63 bytes of [A-Za-z0-9_.-], not starting with '.' (a map
 * name may become a file name). This is the one limit on map names: the
 * daemon's registry, its configuration and its snapshot files (whose
 * format v1 keeps a map's name in a 64-byte field with its NUL) all use
 * it. */
#define TSDF_PROTO_MAX_NAME_LEN 63u
/* Sensor names: 1..64 printable ASCII bytes without spaces (0x21..0x7e).
 * They are labels in stats and metrics only, never stored in a file, so
 * they keep the limit they always had. */
#define TSDF_PROTO_MAX_SENSOR_NAME_LEN 63u
/* Paths in save/load: 1..1024 bytes of valid UTF-8, no NUL byte. */
#define TSDF_PROTO_MAX_PATH_LEN 1024u
/* Error messages in replies: longer ones are truncated on decode. */
#define TSDF_PROTO_MAX_MESSAGE_LEN 255u
/* Entries in a maps reply. */
#define TSDF_PROTO_MAX_MAPS 256u
/* Extension counters in a stats reply ("daemon" map), and their key length. */
#define TSDF_PROTO_MAX_STATS_EXTRA 128u
#define TSDF_PROTO_MAX_STATS_KEY_LEN 47u
/* Frame timelines in a stats reply ("timeline" array; the engine keeps 16). */
#define TSDF_PROTO_MAX_TIMELINE 16u
/* Keys in one msgpack map and nesting depth: bounds the decoder's work. */
#define TSDF_PROTO_MAX_MAP_ENTRIES 256u
#define TSDF_PROTO_MAX_DEPTH 8u

#define TSDF_PROTO_DEFAULT_MAP "default"
#define TSDF_PROTO_DEFAULT_MIN_DEPTH_M 0.1f
#define TSDF_PROTO_DEFAULT_MAX_DEPTH_M 5.0f
#define TSDF_PROTO_DEFAULT_DEPTH_SCALE 0.001f

/* Default addresses (see PROTOCOL.md "Sockets"). */
#define TSDF_PROTO_DEFAULT_REQ_URL "ipc:///run/tsdfd/tsdfd.sock"
#define TSDF_PROTO_DEFAULT_PUSH_URL "ipc:///run/tsdfd/frames.sock"
#define TSDF_PROTO_DEFAULT_REQ_TCP_URL "tcp://127.0.0.1:5555"
#define TSDF_PROTO_DEFAULT_PUSH_TCP_URL "tcp://127.0.0.1:5556"

/* ---- depth encodings --------------------------------------------------- */

/* How a frame's depth samples travel ("depth_encoding", PROTOCOL.md 6.1).
 * Every encoding is lossless: the daemon decodes to exactly the samples the
 * sender had (tsdf_depth_codec.h).
 *
 * The one table of the encodings: X(NAME, value, wire name, carries u16,
 * carries f32, lowest level, highest level, default level), a level range
 * of 0..0 for an encoding that takes none. The codec, tsdfctl and libtsdf
 * read it; the Python package (python/tsdf/_depth.py) holds the same rows,
 * and its tests check them against this table.
 *   raw   the samples as they are (the default: no key on the wire)
 *   png   a 16-bit grayscale PNG (zlib levels; 1: on 7-Scenes, zlib's own
 *         default 6 takes 2.5-3x the time for 24% fewer bytes)
 *   zstd  one zstd frame of the raw little-endian samples (zstd's own
 *         default 3; its levels above 19 need a larger window to decode)
 *   rvl   RVL (Wilson 2017) of u16 samples */
#define TSDF_DEPTH_ENCODINGS(X)                                                                    \
    X(RAW, 0, "raw", 1, 1, 0, 0, 0)                                                                \
    X(PNG, 1, "png", 1, 0, 1, 9, 1)                                                                \
    X(ZSTD, 2, "zstd", 1, 1, 1, 19, 3)                                                             \
    X(RVL, 3, "rvl", 1, 0, 0, 0, 0)

typedef enum {
#define TSDF_DEPTH_ENC_ENUM_(name, value, wire, u16, f32, lo, hi, dflt)                            \
    TSDF_DEPTH_ENC_##name = value,
    TSDF_DEPTH_ENCODINGS(TSDF_DEPTH_ENC_ENUM_)
#undef TSDF_DEPTH_ENC_ENUM_
} tsdf_depth_encoding;
#define TSDF_DEPTH_ENC_COUNT 4

/* ---- replies that the client calls fill --------------------------------- */

typedef struct {
    uint64_t seq;        /* the request's seq */
    uint64_t version;    /* the map's version after the frame; 0 if unknown */
    double integrate_ms; /* time spent integrating; 0 if unknown */
} tsdf_rep_integrate;

/* One daemon counter in a stats reply. */
typedef struct {
    char key[TSDF_PROTO_MAX_STATS_KEY_LEN + 1];
    int is_float; /* 1: f holds the value; 0: i holds it */
    int64_t i;
    double f;
} tsdf_stat_entry;

/* The voxel parameters of a map (stats reply "params"): what it was created
 * with, or what a load gave it (a snapshot keeps them). */
typedef struct {
    float voxel_size_m;        /* edge of one voxel, metres */
    float trunc_vox;           /* truncation distance, voxels */
    float max_weight;          /* weights clamp here */
    uint64_t memory_cap_bytes; /* the map's own volume cap; 0 = none (the cap in force,
                                * engine.memory_cap_bytes, may be lower: the budget) */
    tsdf_layout layout;        /* how the map stores its voxels; 0: not said (an older
                                * daemon) or a layout this side does not know */
} tsdf_map_params;

typedef struct {
    int has_engine; /* 1 when the reply carried an "engine" map */
    /* The keys a reply lacks read 0: engine.layout, pool_capacity_blocks
     * and blocks_erased from a daemon before them (layout also for a
     * layout name this side does not know). */
    tsdf_volume_stats engine;
    int has_params; /* 1 when the reply carried a "params" map (not from older daemons) */
    tsdf_map_params params;
    uint32_t extra_count; /* entries of "daemon", in wire order */
    tsdf_stat_entry extra[TSDF_PROTO_MAX_STATS_EXTRA];
    /* "timeline": device event times of the map's last integrated frames,
     * oldest first (only from a backend that records them: CUDA); 0 when
     * the reply carried none. */
    uint32_t timeline_count;
    tsdf_frame_timeline timeline[TSDF_PROTO_MAX_TIMELINE];
} tsdf_rep_stats;

typedef struct {
    char path[TSDF_PROTO_MAX_PATH_LEN + 1]; /* the file written or read */
    uint64_t version;                       /* the map's version; 0 if unknown */
} tsdf_rep_path;

typedef struct {
    uint32_t count;
    char names[TSDF_PROTO_MAX_MAPS][TSDF_PROTO_MAX_NAME_LEN + 1];
} tsdf_rep_maps;

typedef struct {
    char server[64];    /* e.g. "tsdfd 0.1.0" */
    uint64_t uptime_ms; /* since the daemon started */
} tsdf_rep_ping;

#ifdef __cplusplus
}
#endif

#endif /* TSDF_PROTO_TYPES_H */
