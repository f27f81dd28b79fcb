/*
 * bench_hash.cu - compares probing schemes for the engine's device hash
 * table (gpu/cuda/cuda_hash.cu): linear probing, double hashing, and bucketed
 * probing by cooperative groups of 4 and 8 lanes (a group inspects one
 * window of consecutive slots at a time, as cuCollections does).
 *
 * For each load factor (0.25, 0.5, 0.75, 0.9 of a power-of-two capacity)
 * and each scheme it times, with CUDA events on an explicit stream, the
 * median of several repetitions after a warm-up:
 *   - insertion by compare-and-swap of n = load * capacity distinct keys
 *     (for the scalar schemes twice: a CAS on every probed slot, as the
 *     engine does, and a plain load first with a CAS only on a slot that
 *     looks empty, which is what the cooperative schemes do anyway),
 *   - lookup of m queries (half present, half absent) with five kinds of
 *     load: plain, __ldg, cuda::atomic_ref relaxed, cuda::atomic_ref acquire
 *     and volatile, to quantify what bypassing L1 costs,
 * and reports the mean and maximum probe length (slots for the scalar
 * schemes, windows for the cooperative ones) of hits and misses.
 *
 * Nothing is printed as a time before it has been checked against a CPU
 * reference: the table copied back holds exactly the n inserted keys, each
 * once, each with its own value, and each reachable along its probe
 * sequence; every lookup answer equals the answer of a binary search in the
 * sorted key set; the probe lengths counted on the device equal those of a
 * host walk of the same table; and no probe loop hit its bound (capacity).
 * A failed check prints FAIL and the program exits with status 1.
 *
 * The keys are tsdf_block_key() block coordinates (8 voxels of 1 cm per
 * block) of a synthetic scene -- spheres and tilted planes scattered over a
 * site -- mixed with uniformly random coordinates, hashed by tsdf_key_hash()
 * exactly as the engine does.
 *
 * Usage: bench_hash [--quick] [--log2-capacity N] [--reps N] [--seed S]
 *                   [--cpu-selftest]
 * Exit status: 0 all checks passed, 1 a check or CUDA call failed, 2 bad
 * arguments, 77 no usable CUDA device (nothing measured).
 */
#include <cooperative_groups.h>
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "tsdf_math.h"

namespace cg = cooperative_groups;

/* A benchmark is a program, not library code: a failed CUDA call ends it
 * with a message naming the call and the line (the driver releases the
 * device memory of an exiting process). */
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t ck_err_ = (call);                                                              \
        if (ck_err_ != cudaSuccess) {                                                              \
            fprintf(stderr, "bench_hash: FAIL: %s at %s:%d: %s\n", #call, __FILE__, __LINE__,      \
                    cudaGetErrorString(ck_err_));                                                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CK_LAUNCH() CK(cudaGetLastError())

/* ---- schemes and load kinds --------------------------------------------- */

enum scheme { SCH_LINEAR, SCH_DOUBLE, SCH_COOP4, SCH_COOP8, SCH_COUNT };
static const char *const scheme_names[SCH_COUNT] = {"linear", "double", "coop4", "coop8"};
static const int scheme_group[SCH_COUNT] = {1, 1, 4, 8};

enum load_kind { LD_PLAIN, LD_LDG, LD_RELAXED, LD_ACQUIRE, LD_VOLATILE, LD_COUNT };
static const char *const load_names[LD_COUNT] = {"plain", "ldg", "relaxed", "acquire", "volatile"};

/* Counters on the device: probe loops that reached their bound, and keys an
 * insertion found already present (the benchmark inserts distinct keys, so
 * both must stay 0). */
enum { CTR_INSERT_BOUND, CTR_INSERT_EXISTING, CTR_FIND_BOUND, CTR_COUNT };

/* The probe sequences, shared by the kernels and the host walk. The scalar
 * schemes start at the low bits of the hash; double hashing steps by the
 * high 32 bits forced odd, which is coprime with a power-of-two capacity,
 * so `capacity` steps visit every slot exactly once. The cooperative
 * schemes probe aligned windows of G slots, window after window. */
static __host__ __device__ __forceinline__ uint32_t probe_home(uint64_t h, uint32_t mask)
{
    return (uint32_t)h & mask;
}

static __host__ __device__ __forceinline__ uint32_t probe_step(uint64_t h, bool dbl)
{
    return dbl ? ((uint32_t)(h >> 32) | 1u) : 1u;
}

template <int L> static __device__ __forceinline__ uint64_t load_key(const uint64_t *p)
{
    if (L == LD_PLAIN)
        return *p;
    if (L == LD_LDG)
        return (uint64_t)__ldg((const unsigned long long *)p);
    if (L == LD_VOLATILE)
        return *(const volatile uint64_t *)p;
    /* atomic_ref needs a non-const object; the kernel only reads it. */
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> a(
        *const_cast<unsigned long long *>((const unsigned long long *)p));
    return (uint64_t)a.load(L == LD_ACQUIRE ? cuda::memory_order_acquire
                                            : cuda::memory_order_relaxed);
}

/* The value is read with the same kind of load as the key, except that an
 * acquire is needed once only (on the key), so the value load is relaxed. */
template <int L> static __device__ __forceinline__ int32_t load_val(const int32_t *p)
{
    if (L == LD_PLAIN)
        return *p;
    if (L == LD_LDG)
        return __ldg(p);
    if (L == LD_VOLATILE)
        return *(const volatile int32_t *)p;
    cuda::atomic_ref<int, cuda::thread_scope_device> a(*const_cast<int *>(p));
    return a.load(cuda::memory_order_relaxed);
}

/* ---- kernels: one thread per key ---------------------------------------- */

/* Without LOAD_FIRST: a CAS on every probed slot, as gpu/cuda/cuda_hash.cu does.
 * With LOAD_FIRST: a plain load first, and a CAS only on a slot that looks
 * empty. A plain load may return a stale EMPTY (the CAS then returns the
 * real content) but never a key in a slot that is empty, because slots only
 * go from EMPTY to a key, so no empty slot is ever skipped. The value of
 * key i is i, so the host can tell a misplaced value from a right one. */
template <bool DBL, bool LOAD_FIRST>
static __global__ void k_insert_scalar(uint64_t *keys, int32_t *vals, uint32_t mask,
                                       const uint64_t *__restrict__ src, uint32_t n,
                                       unsigned long long *ctr)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint64_t key = src[i];
    uint64_t h = tsdf_key_hash(key);
    uint32_t s = probe_home(h, mask);
    uint32_t step = probe_step(h, DBL);
    for (uint32_t probes = 0; probes <= mask; probes++) {
        unsigned long long old = TSDF_KEY_EMPTY;
        if (LOAD_FIRST)
            old = keys[s];
        if (old == TSDF_KEY_EMPTY)
            old = atomicCAS((unsigned long long *)&keys[s], (unsigned long long)TSDF_KEY_EMPTY,
                            (unsigned long long)key);
        if (old == TSDF_KEY_EMPTY) {
            vals[s] = (int32_t)i;
            return;
        }
        if (old == key) {
            atomicAdd(&ctr[CTR_INSERT_EXISTING], 1ull);
            return;
        }
        s = (s + step) & mask;
    }
    atomicAdd(&ctr[CTR_INSERT_BOUND], 1ull);
}

/* Writes the value of each query, or -1; with STATS also the number of
 * slots read (a loop that reached its bound writes probes = capacity and
 * is counted). */
template <bool DBL, int L, bool STATS>
static __global__ void k_find_scalar(const uint64_t *keys, const int32_t *vals, uint32_t mask,
                                     const uint64_t *__restrict__ q, uint32_t m, int32_t *out,
                                     uint32_t *probes_out, unsigned long long *ctr)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m)
        return;
    uint64_t key = q[i];
    uint64_t h = tsdf_key_hash(key);
    uint32_t s = probe_home(h, mask);
    uint32_t step = probe_step(h, DBL);
    int32_t r = -1;
    bool done = false;
    uint32_t p = 0;
    while (p <= mask) {
        uint64_t k = load_key<L>(&keys[s]);
        p++;
        if (k == key) {
            r = load_val<L>(&vals[s]);
            done = true;
            break;
        }
        if (k == TSDF_KEY_EMPTY) {
            done = true;
            break;
        }
        s = (s + step) & mask;
    }
    if (!done)
        atomicAdd(&ctr[CTR_FIND_BOUND], 1ull);
    out[i] = r;
    if (STATS)
        probes_out[i] = p;
}

/* ---- kernels: one tile of G lanes per key -------------------------------- */

/* Lane j of the tile owns slot window * G + j. The window values are kept
 * in registers: a plain load may return a stale EMPTY for a slot another
 * tile has just claimed (slots only ever go from EMPTY to a key), and the
 * CAS on that slot returns the real content, which then replaces the stale
 * value, so no slot is ever read twice and the inner loop ends after at
 * most G attempts. A key goes into the first window that has an empty slot,
 * so every window before it is full forever (nothing is deleted), which is
 * what lets a lookup stop at the first window with an empty slot. */
template <int G>
static __global__ void k_insert_coop(uint64_t *keys, int32_t *vals, uint32_t wmask,
                                     const uint64_t *__restrict__ src, uint32_t n,
                                     unsigned long long *ctr)
{
    cg::thread_block_tile<G> tile = cg::tiled_partition<G>(cg::this_thread_block());
    uint32_t t = (blockIdx.x * blockDim.x + threadIdx.x) / G;
    /* All lanes of a tile share t, so whole tiles leave together. */
    if (t >= n)
        return;
    uint32_t lane = tile.thread_rank();
    uint64_t key = src[t];
    uint32_t w = probe_home(tsdf_key_hash(key), wmask);
    for (uint32_t windows = 0; windows <= wmask; windows++) {
        uint32_t s = w * G + lane;
        uint64_t k = keys[s];
        for (;;) {
            if (tile.any(k == key)) {
                if (lane == 0)
                    atomicAdd(&ctr[CTR_INSERT_EXISTING], 1ull);
                return;
            }
            unsigned empty = tile.ballot(k == TSDF_KEY_EMPTY);
            if (!empty)
                break;
            int leader = __ffs(empty) - 1;
            unsigned long long old = 0;
            if ((int)lane == leader) {
                old = atomicCAS((unsigned long long *)&keys[s], (unsigned long long)TSDF_KEY_EMPTY,
                                (unsigned long long)key);
                if (old == TSDF_KEY_EMPTY)
                    vals[s] = (int32_t)t;
            }
            old = tile.shfl(old, leader);
            if (old == TSDF_KEY_EMPTY)
                return;
            if ((int)lane == leader)
                k = old;
        }
        w = (w + 1) & wmask;
    }
    if (lane == 0)
        atomicAdd(&ctr[CTR_INSERT_BOUND], 1ull);
}

template <int G, int L, bool STATS>
static __global__ void k_find_coop(const uint64_t *keys, const int32_t *vals, uint32_t wmask,
                                   const uint64_t *__restrict__ q, uint32_t m, int32_t *out,
                                   uint32_t *probes_out, unsigned long long *ctr)
{
    cg::thread_block_tile<G> tile = cg::tiled_partition<G>(cg::this_thread_block());
    uint32_t t = (blockIdx.x * blockDim.x + threadIdx.x) / G;
    if (t >= m)
        return;
    uint32_t lane = tile.thread_rank();
    uint64_t key = q[t];
    uint32_t w = probe_home(tsdf_key_hash(key), wmask);
    int32_t r = -1;
    bool done = false;
    uint32_t p = 0;
    while (p <= wmask) {
        uint32_t s = w * G + lane;
        uint64_t k = load_key<L>(&keys[s]);
        p++;
        unsigned hit = tile.ballot(k == key);
        if (hit) {
            int leader = __ffs(hit) - 1;
            if ((int)lane == leader)
                r = load_val<L>(&vals[s]);
            r = tile.shfl(r, leader);
            done = true;
            break;
        }
        if (tile.any(k == TSDF_KEY_EMPTY)) {
            done = true;
            break;
        }
        w = (w + 1) & wmask;
    }
    if (lane == 0) {
        if (!done)
            atomicAdd(&ctr[CTR_FIND_BOUND], 1ull);
        out[t] = r;
        if (STATS)
            probes_out[t] = p;
    }
}

/* ---- launchers ----------------------------------------------------------- */

static const int kThreads = 256;

static unsigned grid_for(uint64_t threads)
{
    return (unsigned)((threads + kThreads - 1) / kThreads);
}

/* load_first selects the scalar kernels' load-before-CAS variant; the
 * cooperative kernels always read a window before they CAS. */
static void launch_insert(int sch, bool load_first, uint64_t *keys, int32_t *vals, uint32_t cap,
                          const uint64_t *src, uint32_t n, unsigned long long *ctr, cudaStream_t st)
{
    int g = scheme_group[sch];
    uint32_t wmask = cap / g - 1;
    switch (sch) {
    case SCH_LINEAR:
        if (load_first)
            k_insert_scalar<false, true>
                <<<grid_for(n), kThreads, 0, st>>>(keys, vals, wmask, src, n, ctr);
        else
            k_insert_scalar<false, false>
                <<<grid_for(n), kThreads, 0, st>>>(keys, vals, wmask, src, n, ctr);
        break;
    case SCH_DOUBLE:
        if (load_first)
            k_insert_scalar<true, true>
                <<<grid_for(n), kThreads, 0, st>>>(keys, vals, wmask, src, n, ctr);
        else
            k_insert_scalar<true, false>
                <<<grid_for(n), kThreads, 0, st>>>(keys, vals, wmask, src, n, ctr);
        break;
    case SCH_COOP4:
        k_insert_coop<4>
            <<<grid_for((uint64_t)n * 4), kThreads, 0, st>>>(keys, vals, wmask, src, n, ctr);
        break;
    default:
        k_insert_coop<8>
            <<<grid_for((uint64_t)n * 8), kThreads, 0, st>>>(keys, vals, wmask, src, n, ctr);
        break;
    }
    CK_LAUNCH();
}

template <int L, bool STATS>
static void launch_find_t(int sch, const uint64_t *keys, const int32_t *vals, uint32_t cap,
                          const uint64_t *q, uint32_t m, int32_t *out, uint32_t *probes,
                          unsigned long long *ctr, cudaStream_t st)
{
    int g = scheme_group[sch];
    uint32_t wmask = cap / g - 1;
    unsigned grid = grid_for((uint64_t)m * g);
    switch (sch) {
    case SCH_LINEAR:
        k_find_scalar<false, L, STATS>
            <<<grid, kThreads, 0, st>>>(keys, vals, wmask, q, m, out, probes, ctr);
        break;
    case SCH_DOUBLE:
        k_find_scalar<true, L, STATS>
            <<<grid, kThreads, 0, st>>>(keys, vals, wmask, q, m, out, probes, ctr);
        break;
    case SCH_COOP4:
        k_find_coop<4, L, STATS>
            <<<grid, kThreads, 0, st>>>(keys, vals, wmask, q, m, out, probes, ctr);
        break;
    default:
        k_find_coop<8, L, STATS>
            <<<grid, kThreads, 0, st>>>(keys, vals, wmask, q, m, out, probes, ctr);
        break;
    }
    CK_LAUNCH();
}

static void launch_find(int sch, int ld, bool stats, const uint64_t *keys, const int32_t *vals,
                        uint32_t cap, const uint64_t *q, uint32_t m, int32_t *out, uint32_t *probes,
                        unsigned long long *ctr, cudaStream_t st)
{
    if (stats) {
        launch_find_t<LD_PLAIN, true>(sch, keys, vals, cap, q, m, out, probes, ctr, st);
        return;
    }
    switch (ld) {
    case LD_PLAIN:
        launch_find_t<LD_PLAIN, false>(sch, keys, vals, cap, q, m, out, probes, ctr, st);
        break;
    case LD_LDG:
        launch_find_t<LD_LDG, false>(sch, keys, vals, cap, q, m, out, probes, ctr, st);
        break;
    case LD_RELAXED:
        launch_find_t<LD_RELAXED, false>(sch, keys, vals, cap, q, m, out, probes, ctr, st);
        break;
    case LD_ACQUIRE:
        launch_find_t<LD_ACQUIRE, false>(sch, keys, vals, cap, q, m, out, probes, ctr, st);
        break;
    default:
        launch_find_t<LD_VOLATILE, false>(sch, keys, vals, cap, q, m, out, probes, ctr, st);
        break;
    }
}

/* ---- host: the same schemes, sequentially ------------------------------- */

/* Looks key up in a host copy of a table along the scheme's probe sequence.
 * Returns its value or -1; *probes gets the slots (scalar) or windows
 * (cooperative) read, *bounded is set when the walk reached its bound. */
static int32_t host_find(int sch, const uint64_t *keys, const int32_t *vals, uint32_t cap,
                         uint64_t key, uint32_t *probes, bool *bounded)
{
    uint32_t g = (uint32_t)scheme_group[sch];
    uint32_t wmask = cap / g - 1;
    uint64_t h = tsdf_key_hash(key);
    uint32_t w = probe_home(h, wmask);
    uint32_t step = probe_step(h, sch == SCH_DOUBLE);
    *bounded = false;
    for (uint32_t p = 1; p <= wmask + 1; p++) {
        bool empty = false;
        for (uint32_t j = 0; j < g; j++) {
            uint64_t k = keys[w * g + j];
            if (k == key) {
                *probes = p;
                return vals[w * g + j];
            }
            empty |= k == TSDF_KEY_EMPTY;
        }
        if (empty) {
            *probes = p;
            return -1;
        }
        w = (w + step) & wmask;
    }
    *probes = wmask + 1;
    *bounded = true;
    return -1;
}

/* Sequential insertion with the kernels' rules (used by --cpu-selftest).
 * Returns 1 inserted, 0 already present, -1 the probe loop reached its
 * bound. */
static int host_insert(int sch, uint64_t *keys, int32_t *vals, uint32_t cap, uint64_t key,
                       int32_t val)
{
    uint32_t g = (uint32_t)scheme_group[sch];
    uint32_t wmask = cap / g - 1;
    uint64_t h = tsdf_key_hash(key);
    uint32_t w = probe_home(h, wmask);
    uint32_t step = probe_step(h, sch == SCH_DOUBLE);
    for (uint32_t p = 0; p <= wmask; p++) {
        int first_empty = -1;
        for (uint32_t j = 0; j < g; j++) {
            uint64_t k = keys[w * g + j];
            if (k == key)
                return 0;
            if (k == TSDF_KEY_EMPTY && first_empty < 0)
                first_empty = (int)j;
        }
        if (first_empty >= 0) {
            keys[w * g + (uint32_t)first_empty] = key;
            vals[w * g + (uint32_t)first_empty] = val;
            return 1;
        }
        w = (w + step) & wmask;
    }
    return -1;
}

/* ---- host: keys ---------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

static void shuffle_keys(std::vector<uint64_t> &v, uint64_t *rng)
{
    for (size_t i = v.size(); i > 1; i--) {
        size_t j = (size_t)(rng_next(rng) % i);
        std::swap(v[i - 1], v[j]);
    }
}

static void sort_unique(std::vector<uint64_t> &v)
{
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
}

/* 1 cm voxels, 8 voxels per block edge. Surface points are sampled at half
 * a block, which touches (almost) every block the surface crosses. */
static const double kBlockM = 0.08;
static const double kSampleM = 0.04;

static void push_point(std::vector<uint64_t> &out, double x, double y, double z)
{
    out.push_back(tsdf_block_key((int32_t)floor(x / kBlockM), (int32_t)floor(y / kBlockM),
                                 (int32_t)floor(z / kBlockM)));
}

/* One object of the synthetic site: a sphere (radius 1-6 m) or a tilted
 * rectangle (a wall or a floor, 5-30 m by 2-10 m), centred in a 1 km x
 * 1 km x 40 m box, appended as block keys (with repeats). */
static void push_object(std::vector<uint64_t> &out, uint64_t *rng)
{
    double cx = (rng_unit(rng) - 0.5) * 1000.0;
    double cy = (rng_unit(rng) - 0.5) * 1000.0;
    double cz = (rng_unit(rng) - 0.5) * 40.0;
    if (rng_next(rng) & 1) {
        double r = 1.0 + 5.0 * rng_unit(rng);
        int rings = (int)ceil(M_PI * r / kSampleM);
        for (int a = 0; a <= rings; a++) {
            double th = M_PI * a / rings;
            double rr = r * sin(th);
            int n = std::max(1, (int)ceil(2.0 * M_PI * rr / kSampleM));
            for (int b = 0; b < n; b++) {
                double ph = 2.0 * M_PI * b / n;
                push_point(out, cx + rr * cos(ph), cy + rr * sin(ph), cz + r * cos(th));
            }
        }
    } else {
        /* Two orthonormal in-plane directions from a random normal. */
        double nx = rng_unit(rng) - 0.5, ny = rng_unit(rng) - 0.5, nz = rng_unit(rng) - 0.5;
        double nl = sqrt(nx * nx + ny * ny + nz * nz) + 1e-12;
        nx /= nl, ny /= nl, nz /= nl;
        double ax = fabs(nx) < 0.9 ? 1.0 : 0.0, ay = 1.0 - ax, az = 0.0;
        double ux = ny * az - nz * ay, uy = nz * ax - nx * az, uz = nx * ay - ny * ax;
        double ul = sqrt(ux * ux + uy * uy + uz * uz);
        ux /= ul, uy /= ul, uz /= ul;
        double vx = ny * uz - nz * uy, vy = nz * ux - nx * uz, vz = nx * uy - ny * ux;
        double wu = 5.0 + 25.0 * rng_unit(rng), wv = 2.0 + 8.0 * rng_unit(rng);
        int nu = (int)ceil(wu / kSampleM), nv = (int)ceil(wv / kSampleM);
        for (int a = 0; a <= nu; a++)
            for (int b = 0; b <= nv; b++) {
                double su = a * kSampleM, sv = b * kSampleM;
                push_point(out, cx + su * ux + sv * vx, cy + su * uy + sv * vy,
                           cz + su * uz + sv * vz);
            }
    }
}

/* `total` distinct keys in random order, about two thirds from surfaces and
 * one third uniformly random over the whole key range. */
static std::vector<uint64_t> make_key_pool(size_t total, uint64_t seed, size_t *n_surface)
{
    uint64_t rng = seed;
    size_t surface_target = total / 3 * 2;
    std::vector<uint64_t> pool;
    std::vector<uint64_t> obj;
    while (pool.size() < surface_target) {
        obj.clear();
        push_object(obj, &rng);
        sort_unique(obj);
        pool.insert(pool.end(), obj.begin(), obj.end());
        if (pool.size() >= surface_target)
            sort_unique(pool);
    }
    shuffle_keys(pool, &rng);
    pool.resize(surface_target);
    *n_surface = pool.size();
    /* The uniform keys: candidates until enough of them are new. */
    std::vector<uint64_t> surface(pool);
    std::sort(surface.begin(), surface.end());
    const uint32_t span = (uint32_t)TSDF_BLOCK_COORD_MAX - (uint32_t)TSDF_BLOCK_COORD_MIN + 1u;
    std::vector<uint64_t> uniform, fresh;
    while (uniform.size() < total - surface_target) {
        size_t need = total - surface_target - uniform.size();
        for (size_t i = 0; i < need + need / 8 + 16; i++) {
            int32_t c[3];
            for (int d = 0; d < 3; d++)
                c[d] = TSDF_BLOCK_COORD_MIN + (int32_t)(rng_next(&rng) % span);
            uniform.push_back(tsdf_block_key(c[0], c[1], c[2]));
        }
        sort_unique(uniform);
        fresh.clear();
        std::set_difference(uniform.begin(), uniform.end(), surface.begin(), surface.end(),
                            std::back_inserter(fresh));
        uniform.swap(fresh);
    }
    shuffle_keys(uniform, &rng);
    uniform.resize(total - surface_target);
    pool.insert(pool.end(), uniform.begin(), uniform.end());
    shuffle_keys(pool, &rng);
    return pool;
}

/* ---- host: the reference and the checks ---------------------------------- */

typedef std::pair<uint64_t, uint32_t> key_index;

/* The reference of one load: the inserted keys sorted, with their index
 * (which is the value the insertion stored). */
static std::vector<key_index> make_reference(const uint64_t *keys, uint32_t n)
{
    std::vector<key_index> ref(n);
    for (uint32_t i = 0; i < n; i++)
        ref[i] = key_index(keys[i], i);
    std::sort(ref.begin(), ref.end());
    return ref;
}

/* Index of key in the reference, or -1. */
static int64_t ref_find(const std::vector<key_index> &ref, uint64_t key)
{
    auto it = std::lower_bound(ref.begin(), ref.end(), key_index(key, 0u));
    if (it == ref.end() || it->first != key)
        return -1;
    return it - ref.begin();
}

/* At most a few failure messages are printed (from any thread, one
 * fprintf each so that lines do not interleave). */
static std::atomic<unsigned> g_fail_shown(0);

static void report_fail(const char *what, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void report_fail(const char *what, const char *fmt, ...)
{
    if (g_fail_shown++ >= 8)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "bench_hash: FAIL [%s]: %s\n", what, msg);
}

/* Runs f(thread, begin, end) over [0, n) split across the host cores: the
 * host walks of millions of keys would otherwise dominate the run time. */
template <class F> static void parallel_ranges(size_t n, unsigned max_threads, F f)
{
    unsigned nt = std::thread::hardware_concurrency();
    nt = std::max(1u, std::min(nt, max_threads));
    if (n < 65536)
        nt = 1;
    std::vector<std::thread> th;
    for (unsigned t = 1; t < nt; t++)
        th.emplace_back(f, t, n * t / nt, n * (t + 1) / nt);
    f(0u, (size_t)0, n / nt);
    for (std::thread &x : th)
        x.join();
}

static const unsigned kMaxHostThreads = 16;

/* The whole table against the reference: exactly n occupied slots, each an
 * inserted key seen once with its own value, and each inserted key
 * reachable along its probe sequence. Key i is stored with value i, so a
 * slot is right exactly when its value v is in [0, n) and keys[v] is its
 * key; that needs no search per slot. The sorted reference is used for the
 * completeness pass. Returns the number of errors. */
static uint64_t check_table(const char *what, int sch, const uint64_t *keys, const int32_t *vals,
                            uint32_t cap, const uint64_t *inserted,
                            const std::vector<key_index> &ref)
{
    uint64_t errors = 0, occupied = 0;
    uint32_t n = (uint32_t)ref.size();
    std::vector<uint8_t> seen(n, 0);
    for (uint32_t s = 0; s < cap; s++) {
        if (keys[s] == TSDF_KEY_EMPTY)
            continue;
        occupied++;
        int32_t v = vals[s];
        if (v < 0 || (uint32_t)v >= n || inserted[v] != keys[s]) {
            int64_t r = ref_find(ref, keys[s]);
            if (r < 0)
                report_fail(what, "slot %u holds key %#llx that was never inserted", s,
                            (unsigned long long)keys[s]);
            else
                report_fail(what, "slot %u: key %#llx has value %d, expected %u", s,
                            (unsigned long long)keys[s], v, ref[r].second);
            errors++;
            continue;
        }
        if (seen[v]++) {
            report_fail(what, "key %#llx is in the table more than once (slot %u)",
                        (unsigned long long)keys[s], s);
            errors++;
        }
    }
    if (occupied != n) {
        report_fail(what, "%llu occupied slots, expected %u", (unsigned long long)occupied, n);
        errors++;
    }
    std::vector<uint64_t> terr(kMaxHostThreads, 0);
    parallel_ranges(n, kMaxHostThreads, [&](unsigned t, size_t begin, size_t end) {
        for (size_t r = begin; r < end; r++) {
            uint32_t probes, i = ref[r].second;
            bool bounded;
            if (!seen[i]) {
                report_fail(what, "inserted key %#llx is missing",
                            (unsigned long long)ref[r].first);
                terr[t]++;
            } else if (host_find(sch, keys, vals, cap, ref[r].first, &probes, &bounded) !=
                       (int32_t)i) {
                report_fail(what, "key %#llx is not reachable along its probe sequence",
                            (unsigned long long)ref[r].first);
                terr[t]++;
            }
        }
    });
    for (uint64_t e : terr)
        errors += e;
    return errors;
}

static uint64_t check_find(const char *what, const int32_t *out, const std::vector<int32_t> &expect)
{
    uint64_t errors = 0;
    for (size_t i = 0; i < expect.size(); i++)
        if (out[i] != expect[i]) {
            report_fail(what, "query %zu: answer %d, expected %d", i, out[i], expect[i]);
            errors++;
        }
    return errors;
}

struct probe_summary {
    double hit_mean, miss_mean;
    uint32_t hit_max, miss_max;
};

/* Probe lengths of every query: those of the device (when given) must
 * equal a host walk of the same table. Returns the number of errors. */
static uint64_t summarize_probes(const char *what, int sch, const uint64_t *keys,
                                 const int32_t *vals, uint32_t cap, const uint64_t *q,
                                 const std::vector<int32_t> &expect, const uint32_t *dev_probes,
                                 probe_summary *ps)
{
    struct part {
        uint64_t errors, hits, misses;
        double hit_sum, miss_sum;
        uint32_t hit_max, miss_max;
    };
    std::vector<part> parts(kMaxHostThreads, part{0, 0, 0, 0.0, 0.0, 0, 0});
    parallel_ranges(expect.size(), kMaxHostThreads, [&](unsigned t, size_t begin, size_t end) {
        part &pt = parts[t];
        for (size_t i = begin; i < end; i++) {
            uint32_t p;
            bool bounded;
            int32_t r = host_find(sch, keys, vals, cap, q[i], &p, &bounded);
            if (r != expect[i] || bounded) {
                report_fail(what, "host walk of query %zu: %d (bound %d), expected %d", i, r,
                            (int)bounded, expect[i]);
                pt.errors++;
            }
            if (dev_probes && dev_probes[i] != p) {
                report_fail(what, "query %zu: device read %u slots/windows, host walk %u", i,
                            dev_probes[i], p);
                pt.errors++;
            }
            if (expect[i] >= 0) {
                pt.hits++, pt.hit_sum += p;
                pt.hit_max = std::max(pt.hit_max, p);
            } else {
                pt.misses++, pt.miss_sum += p;
                pt.miss_max = std::max(pt.miss_max, p);
            }
        }
    });
    part all = {0, 0, 0, 0.0, 0.0, 0, 0};
    for (const part &pt : parts) {
        all.errors += pt.errors, all.hits += pt.hits, all.misses += pt.misses;
        all.hit_sum += pt.hit_sum, all.miss_sum += pt.miss_sum;
        all.hit_max = std::max(all.hit_max, pt.hit_max);
        all.miss_max = std::max(all.miss_max, pt.miss_max);
    }
    ps->hit_mean = all.hits ? all.hit_sum / (double)all.hits : 0.0;
    ps->miss_mean = all.misses ? all.miss_sum / (double)all.misses : 0.0;
    ps->hit_max = all.hit_max;
    ps->miss_max = all.miss_max;
    return all.errors;
}

/* ---- the workload --------------------------------------------------------- */

static const double kLoads[] = {0.25, 0.5, 0.75, 0.9};
static const int kNumLoads = (int)(sizeof kLoads / sizeof kLoads[0]);

struct options {
    int log2_cap;
    int reps;
    uint64_t seed;
    bool quick;
    bool selftest;
};

struct workload {
    uint32_t cap, m, n_max;
    size_t n_surface;
    std::vector<uint64_t> pool; /* [0, n_max) insertable, [n_max, ...) never inserted */
};

static uint32_t keys_for_load(uint32_t cap, double load)
{
    return (uint32_t)(load * (double)cap);
}

/* Queries of one load: m / 2 inserted keys (drawn with repetition) and
 * m / 2 keys that are never inserted, shuffled; the expected answers come
 * from the reference alone. */
static void make_queries(const workload &wl, uint32_t n, const std::vector<key_index> &ref,
                         uint64_t seed, std::vector<uint64_t> &q, std::vector<int32_t> &expect)
{
    uint64_t rng = seed;
    uint32_t half = wl.m / 2;
    q.resize(wl.m);
    for (uint32_t i = 0; i < half; i++)
        q[i] = wl.pool[rng_next(&rng) % n];
    for (uint32_t i = half; i < wl.m; i++)
        q[i] = wl.pool[wl.n_max + (i - half)];
    shuffle_keys(q, &rng);
    expect.resize(wl.m);
    for (uint32_t i = 0; i < wl.m; i++) {
        int64_t r = ref_find(ref, q[i]);
        expect[i] = r < 0 ? -1 : (int32_t)ref[r].second;
    }
}

static void make_workload(const options &o, workload *wl)
{
    wl->cap = 1u << o.log2_cap;
    wl->m = wl->cap / 2;
    wl->n_max = keys_for_load(wl->cap, kLoads[kNumLoads - 1]);
    wl->pool = make_key_pool((size_t)wl->n_max + wl->m / 2, o.seed, &wl->n_surface);
}

static double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/* ---- the final table ---------------------------------------------------- */

struct result_row {
    int sch;
    double load;
    uint32_t n;
    double insert_mkeys_s;
    double insert_ld_mkeys_s; /* scalar schemes' load-before-CAS; -1 for the others */
    double find_mq_s[LD_COUNT];
    probe_summary ps;
};

static double best_insert(const result_row &r)
{
    return std::max(r.insert_mkeys_s, r.insert_ld_mkeys_s);
}

static void print_table(const workload &wl, const std::vector<result_row> &rows)
{
    printf("\nResults (capacity %u slots, %u queries per load: 50%% present, 50%% absent; "
           "probes = slots read (linear, double) or windows read (coopG); Mq/s = million "
           "queries per second)\n",
           wl.cap, wl.m);
    printf("| scheme | load | keys | insert Mkeys/s | insert load-first Mkeys/s |");
    for (int ld = 0; ld < LD_COUNT; ld++)
        printf(" find %s Mq/s |", load_names[ld]);
    printf(" hit probes mean/max | miss probes mean/max |\n|---|---|---|---|---|");
    for (int ld = 0; ld < LD_COUNT; ld++)
        printf("---|");
    printf("---|---|\n");
    for (const result_row &r : rows) {
        printf("| %s | %.2f | %u | %.1f |", scheme_names[r.sch], r.load, r.n, r.insert_mkeys_s);
        if (r.insert_ld_mkeys_s >= 0)
            printf(" %.1f |", r.insert_ld_mkeys_s);
        else
            printf(" (same) |");
        for (int ld = 0; ld < LD_COUNT; ld++)
            printf(" %.1f |", r.find_mq_s[ld]);
        printf(" %.2f / %u | %.2f / %u |\n", r.ps.hit_mean, r.ps.hit_max, r.ps.miss_mean,
               r.ps.miss_max);
    }
    printf("\nFastest per load (every scheme above passed all checks):\n");
    for (int li = 0; li < kNumLoads; li++) {
        const result_row *bi = NULL, *bf = NULL;
        int bf_ld = LD_PLAIN;
        for (const result_row &r : rows) {
            if (r.load != kLoads[li])
                continue;
            if (!bi || best_insert(r) > best_insert(*bi))
                bi = &r;
            for (int ld = LD_PLAIN; ld <= LD_LDG; ld++)
                if (!bf || r.find_mq_s[ld] > bf->find_mq_s[bf_ld]) {
                    bf = &r;
                    bf_ld = ld;
                }
        }
        if (bi && bf)
            printf("  load %.2f: insert %s%s (%.1f Mkeys/s), find %s with %s loads (%.1f Mq/s)\n",
                   kLoads[li], scheme_names[bi->sch],
                   bi->insert_ld_mkeys_s > bi->insert_mkeys_s ? " load-first" : "",
                   best_insert(*bi), scheme_names[bf->sch], load_names[bf_ld],
                   bf->find_mq_s[bf_ld]);
    }
}

/* ---- --cpu-selftest: the host half, without a GPU ------------------------ */

/* Builds every table with host_insert (the kernels' rules, sequentially),
 * checks it exactly as the GPU tables are checked, prints the probe lengths
 * (to compare with the textbook figures), and then proves that the checks
 * can fail: a dropped key, a duplicated key, a wrong value and a wrong
 * answer must each be reported. */
static int run_selftest(const workload &wl)
{
    uint64_t errors = 0;
    double check_s = 0.0;
    std::vector<result_row> rows;
    uint32_t cap = wl.cap;
    std::vector<uint64_t> keys(cap);
    std::vector<int32_t> vals(cap);
    std::vector<uint64_t> sorted(wl.pool);
    sort_unique(sorted);
    if (sorted.size() != wl.pool.size() ||
        std::binary_search(sorted.begin(), sorted.end(), TSDF_KEY_EMPTY)) {
        report_fail("selftest", "the key pool has %zu distinct keys of %zu (or holds EMPTY)",
                    sorted.size(), wl.pool.size());
        errors++;
    }
    printf("%-7s %5s %9s | %-15s %-15s\n", "scheme", "load", "keys", "hit mean/max",
           "miss mean/max");
    for (int li = 0; li < kNumLoads; li++) {
        uint32_t n = keys_for_load(cap, kLoads[li]);
        std::vector<key_index> ref = make_reference(wl.pool.data(), n);
        std::vector<uint64_t> q;
        std::vector<int32_t> expect;
        make_queries(wl, n, ref, 1000u + li, q, expect);
        size_t present = 0;
        for (int32_t e : expect)
            present += e >= 0;
        if (present != wl.m / 2) {
            report_fail("selftest", "%zu of %u queries present, expected %u", present, wl.m,
                        wl.m / 2);
            errors++;
        }
        for (int sch = 0; sch < SCH_COUNT; sch++) {
            std::fill(keys.begin(), keys.end(), TSDF_KEY_EMPTY);
            for (uint32_t i = 0; i < n; i++)
                if (host_insert(sch, keys.data(), vals.data(), cap, wl.pool[i], (int32_t)i) != 1) {
                    report_fail("selftest", "host insertion of key %u failed", i);
                    errors++;
                }
            char what[64];
            snprintf(what, sizeof what, "selftest %s %.2f", scheme_names[sch], kLoads[li]);
            auto tc = std::chrono::steady_clock::now();
            errors += check_table(what, sch, keys.data(), vals.data(), cap, wl.pool.data(), ref);
            probe_summary ps;
            errors += summarize_probes(what, sch, keys.data(), vals.data(), cap, q.data(), expect,
                                       NULL, &ps);
            check_s += seconds_since(tc);
            result_row row;
            memset(&row, 0, sizeof row);
            row.sch = sch;
            row.load = kLoads[li];
            row.n = n;
            row.insert_ld_mkeys_s = scheme_group[sch] == 1 ? 0.0 : -1.0;
            row.ps = ps;
            rows.push_back(row);
            printf("%-7s %5.2f %9u | %6.2f / %-6u %6.2f / %-6u\n", scheme_names[sch], kLoads[li], n,
                   ps.hit_mean, ps.hit_max, ps.miss_mean, ps.miss_max);

            if (li == 1) {
                /* Each corruption must be caught; the messages are expected,
                 * so they are not counted as errors of the program. */
                unsigned shown = g_fail_shown;
                g_fail_shown = 1000;
                uint32_t s = 0;
                while (keys[s] == TSDF_KEY_EMPTY)
                    s++;
                uint32_t e = 0;
                while (keys[e] != TSDF_KEY_EMPTY)
                    e++;
                uint64_t k = keys[s];
                keys[s] = TSDF_KEY_EMPTY;
                bool drop =
                    check_table("x", sch, keys.data(), vals.data(), cap, wl.pool.data(), ref) > 0;
                keys[s] = k;
                keys[e] = k;
                vals[e] = vals[s];
                bool dup =
                    check_table("x", sch, keys.data(), vals.data(), cap, wl.pool.data(), ref) > 0;
                keys[e] = TSDF_KEY_EMPTY;
                vals[s] ^= 1;
                bool val =
                    check_table("x", sch, keys.data(), vals.data(), cap, wl.pool.data(), ref) > 0;
                vals[s] ^= 1;
                std::vector<int32_t> out(expect);
                out[out.size() / 2] = out[out.size() / 2] >= 0 ? -1 : 0;
                bool ans = check_find("x", out.data(), expect) > 0;
                bool clean =
                    check_table("x", sch, keys.data(), vals.data(), cap, wl.pool.data(), ref) == 0;
                g_fail_shown = shown;
                if (!drop || !dup || !val || !ans || !clean) {
                    report_fail(what,
                                "a corruption went unnoticed (drop %d dup %d val %d "
                                "answer %d restored-clean %d)",
                                drop, dup, val, ans, clean);
                    errors++;
                }
            }
        }
    }
    printf("\nThe final table's layout (no GPU, so every rate is 0):");
    print_table(wl, rows);
    if (errors) {
        printf("bench_hash: selftest FAIL (%llu errors)\n", (unsigned long long)errors);
        return 1;
    }
    printf("bench_hash: selftest PASS (tables, answers, probe walks and corruption detection); "
           "the checks a GPU run also makes took %.2f s\n",
           check_s);
    return 0;
}

/* ---- the GPU run ----------------------------------------------------------- */

struct device_buffers {
    uint64_t *keys, *src, *q;
    int32_t *vals, *out;
    uint32_t *probes;
    unsigned long long *ctr;
};

static double median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    size_t k = v.size();
    return k % 2 ? v[k / 2] : 0.5 * ((double)v[k / 2 - 1] + v[k / 2]);
}

static bool counters_clean(const char *what, const device_buffers &d, cudaStream_t st)
{
    unsigned long long c[CTR_COUNT];
    CK(cudaMemcpyAsync(c, d.ctr, sizeof c, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    if (c[CTR_INSERT_BOUND] || c[CTR_INSERT_EXISTING] || c[CTR_FIND_BOUND]) {
        report_fail(what,
                    "insertions that hit the bound %llu, found existing %llu, lookups "
                    "that hit the bound %llu (all must be 0)",
                    c[CTR_INSERT_BOUND], c[CTR_INSERT_EXISTING], c[CTR_FIND_BOUND]);
        return false;
    }
    return true;
}

static int run_gpu(const options &o, const workload &wl, std::vector<result_row> &rows)
{
    const uint32_t cap = wl.cap, m = wl.m;
    cudaStream_t st;
    cudaEvent_t ev0, ev1;
    device_buffers d;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    CK(cudaMalloc(&d.keys, (size_t)cap * sizeof(uint64_t)));
    CK(cudaMalloc(&d.vals, (size_t)cap * sizeof(int32_t)));
    CK(cudaMalloc(&d.src, (size_t)wl.n_max * sizeof(uint64_t)));
    CK(cudaMalloc(&d.q, (size_t)m * sizeof(uint64_t)));
    CK(cudaMalloc(&d.out, (size_t)m * sizeof(int32_t)));
    CK(cudaMalloc(&d.probes, (size_t)m * sizeof(uint32_t)));
    CK(cudaMalloc(&d.ctr, CTR_COUNT * sizeof(unsigned long long)));
    CK(cudaMemcpyAsync(d.src, wl.pool.data(), (size_t)wl.n_max * sizeof(uint64_t),
                       cudaMemcpyHostToDevice, st));

    std::vector<uint64_t> h_keys(cap);
    std::vector<int32_t> h_vals(cap), h_out(m);
    std::vector<uint32_t> h_probes(m);
    int rc = 0;

    for (int li = 0; li < kNumLoads && rc == 0; li++) {
        uint32_t n = keys_for_load(cap, kLoads[li]);
        std::vector<key_index> ref = make_reference(wl.pool.data(), n);
        std::vector<uint64_t> q;
        std::vector<int32_t> expect;
        make_queries(wl, n, ref, 1000u + li, q, expect);
        CK(cudaMemcpyAsync(d.q, q.data(), (size_t)m * sizeof(uint64_t), cudaMemcpyHostToDevice,
                           st));
        for (int sch = 0; sch < SCH_COUNT && rc == 0; sch++) {
            char what[64];
            snprintf(what, sizeof what, "%s load %.2f", scheme_names[sch], kLoads[li]);
            result_row row;
            row.sch = sch;
            row.load = kLoads[li];
            row.n = n;
            CK(cudaMemsetAsync(d.ctr, 0, CTR_COUNT * sizeof(unsigned long long), st));

            /* Insertion into an emptied table (all bytes 0xff is
             * TSDF_KEY_EMPTY): one warm-up, then the timed repetitions; for
             * the scalar schemes CAS-only and then load-before-CAS. The
             * table of each variant's last repetition is checked (the last
             * one is then searched); the counters cover every repetition. */
            std::vector<float> ms;
            int variants = scheme_group[sch] == 1 ? 2 : 1;
            row.insert_ld_mkeys_s = -1.0;
            for (int var = 0; var < variants && rc == 0; var++) {
                ms.clear();
                for (int r = 0; r <= o.reps; r++) {
                    CK(cudaMemsetAsync(d.keys, 0xff, (size_t)cap * sizeof(uint64_t), st));
                    CK(cudaEventRecord(ev0, st));
                    launch_insert(sch, var == 1, d.keys, d.vals, cap, d.src, n, d.ctr, st);
                    CK(cudaEventRecord(ev1, st));
                    CK(cudaEventSynchronize(ev1));
                    float t;
                    CK(cudaEventElapsedTime(&t, ev0, ev1));
                    if (r > 0)
                        ms.push_back(t);
                }
                CK(cudaMemcpyAsync(h_keys.data(), d.keys, (size_t)cap * sizeof(uint64_t),
                                   cudaMemcpyDeviceToHost, st));
                CK(cudaMemcpyAsync(h_vals.data(), d.vals, (size_t)cap * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, st));
                CK(cudaStreamSynchronize(st));
                char w2[96];
                snprintf(w2, sizeof w2, "%s insert%s", what, var == 1 ? " load-first" : "");
                if (!counters_clean(w2, d, st) || check_table(w2, sch, h_keys.data(), h_vals.data(),
                                                              cap, wl.pool.data(), ref) != 0) {
                    rc = 1;
                    break;
                }
                double rate = (double)n / (median(ms) * 1e-3) / 1e6;
                if (var == 0)
                    row.insert_mkeys_s = rate;
                else
                    row.insert_ld_mkeys_s = rate;
            }
            if (rc != 0)
                break;

            /* Lookups: every repetition's answers are checked. */
            for (int ld = 0; ld < LD_COUNT && rc == 0; ld++) {
                ms.clear();
                for (int r = 0; r <= o.reps; r++) {
                    CK(cudaMemsetAsync(d.out, 0x7f, (size_t)m * sizeof(int32_t), st));
                    CK(cudaEventRecord(ev0, st));
                    launch_find(sch, ld, false, d.keys, d.vals, cap, d.q, m, d.out, NULL, d.ctr,
                                st);
                    CK(cudaEventRecord(ev1, st));
                    CK(cudaMemcpyAsync(h_out.data(), d.out, (size_t)m * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, st));
                    CK(cudaStreamSynchronize(st));
                    float t;
                    CK(cudaEventElapsedTime(&t, ev0, ev1));
                    char w2[96];
                    snprintf(w2, sizeof w2, "%s find %s rep %d", what, load_names[ld], r);
                    if (check_find(w2, h_out.data(), expect) != 0) {
                        rc = 1;
                        break;
                    }
                    if (r > 0)
                        ms.push_back(t);
                }
                if (rc == 0)
                    row.find_mq_s[ld] = (double)m / (median(ms) * 1e-3) / 1e6;
            }
            if (rc != 0)
                break;

            /* Probe lengths, counted by the device (an untimed launch) and
             * checked against a host walk of the copied table. */
            CK(cudaMemsetAsync(d.out, 0x7f, (size_t)m * sizeof(int32_t), st));
            launch_find(sch, LD_PLAIN, true, d.keys, d.vals, cap, d.q, m, d.out, d.probes, d.ctr,
                        st);
            CK(cudaMemcpyAsync(h_out.data(), d.out, (size_t)m * sizeof(int32_t),
                               cudaMemcpyDeviceToHost, st));
            CK(cudaMemcpyAsync(h_probes.data(), d.probes, (size_t)m * sizeof(uint32_t),
                               cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            if (check_find(what, h_out.data(), expect) != 0 || !counters_clean(what, d, st) ||
                summarize_probes(what, sch, h_keys.data(), h_vals.data(), cap, q.data(), expect,
                                 h_probes.data(), &row.ps) != 0) {
                rc = 1;
                break;
            }
            printf("  checked %-6s load %.2f: insert %8.1f Mkeys/s, find plain %8.1f Mq/s\n",
                   scheme_names[sch], kLoads[li], row.insert_mkeys_s, row.find_mq_s[LD_PLAIN]);
            fflush(stdout);
            rows.push_back(row);
        }
    }

    CK(cudaFree(d.keys));
    CK(cudaFree(d.vals));
    CK(cudaFree(d.src));
    CK(cudaFree(d.q));
    CK(cudaFree(d.out));
    CK(cudaFree(d.probes));
    CK(cudaFree(d.ctr));
    CK(cudaEventDestroy(ev0));
    CK(cudaEventDestroy(ev1));
    CK(cudaStreamDestroy(st));
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_hash [--quick] [--log2-capacity N (16..28, default 22; 20 with "
               "--quick)]\n"
               "                  [--reps N (1..100, default 7; 3 with --quick)] [--seed S]\n"
               "                  [--cpu-selftest (host checks only, no GPU needed)]\n");
}

static bool parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

int main(int argc, char **argv)
{
    options o;
    o.log2_cap = -1;
    o.reps = -1;
    o.seed = 0x7473646668617368ull;
    o.quick = false;
    o.selftest = false;
    for (int i = 1; i < argc; i++) {
        long v;
        if (!strcmp(argv[i], "--quick")) {
            o.quick = true;
        } else if (!strcmp(argv[i], "--cpu-selftest")) {
            o.selftest = true;
        } else if (!strcmp(argv[i], "--log2-capacity") && i + 1 < argc &&
                   parse_int(argv[i + 1], 16, 28, &v)) {
            o.log2_cap = (int)v;
            i++;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc &&
                   parse_int(argv[i + 1], 1, 100, &v)) {
            o.reps = (int)v;
            i++;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc &&
                   parse_int(argv[i + 1], 0, 0x7fffffffL, &v)) {
            o.seed = (uint64_t)v;
            i++;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "bench_hash: bad argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (o.log2_cap < 0)
        o.log2_cap = o.quick ? 20 : 22;
    if (o.reps < 0)
        o.reps = o.quick ? 3 : 7;

    if (!o.selftest) {
        /* Ask for a device before spending seconds on keys. */
        int ndev = 0;
        cudaError_t err = cudaGetDeviceCount(&ndev);
        if (err != cudaSuccess || ndev == 0) {
            fprintf(stderr,
                    "bench_hash: no usable CUDA device (%s); nothing measured "
                    "(--cpu-selftest runs the host checks alone)\n",
                    err != cudaSuccess ? cudaGetErrorString(err) : "device count 0");
            return 77;
        }
        cudaDeviceProp prop;
        int rt = 0, drv = 0;
        CK(cudaSetDevice(0));
        CK(cudaGetDeviceProperties(&prop, 0));
        CK(cudaRuntimeGetVersion(&rt));
        CK(cudaDriverGetVersion(&drv));
        printf("device 0: %s (sm_%d%d, %d SMs, L2 %d MiB, %.1f GiB), runtime %d, driver %d\n",
               prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20,
               (double)prop.totalGlobalMem / (1 << 30), rt, drv);
    }

    auto t0 = std::chrono::steady_clock::now();
    workload wl;
    make_workload(o, &wl);
    printf("keys: %zu distinct (%zu surface blocks of spheres and planes at 1 cm voxels, the "
           "rest uniform), capacity 2^%d = %u slots, %u queries per load, %d reps + 1 warm-up, "
           "seed %llu; generated in %.2f s\n",
           wl.pool.size(), wl.n_surface, o.log2_cap, wl.cap, wl.m, o.reps,
           (unsigned long long)o.seed, seconds_since(t0));
    fflush(stdout);

    if (o.selftest) {
        int rc = run_selftest(wl);
        printf("selftest took %.2f s\n", seconds_since(t0));
        return rc;
    }

    std::vector<result_row> rows;
    int rc = run_gpu(o, wl, rows);
    if (rc != 0) {
        printf("bench_hash: FAIL (see the messages above); no figures reported\n");
        return 1;
    }
    print_table(wl, rows);
    printf("\nbench_hash: all checks PASS, total %.2f s\n", seconds_since(t0));
    return 0;
}
