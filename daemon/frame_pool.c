/*
 * frame_pool.c - page-locked buffers for queued frames' depth (see
 * frame_pool.h).
 */
#include "frame_pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "tsdf_types.h"
#include "tsdf_volume.h"

/* In front of every buffer: its size and the kept list's link. 64 bytes,
 * so the bytes handed out keep tsdf_host_alloc's 64-byte alignment. */
#define BUF_HEADER 64u
#define BUF_MAGIC 0x66706f6f6c627566ull /* "fpoolbuf" */

typedef struct buf_hdr {
    uint64_t magic;
    size_t cap; /* bytes after the header */
    struct buf_hdr *next;
} buf_hdr;

struct frame_pool {
    pthread_mutex_t lock;
    buf_hdr *kept; /* buffers back from their users */
    frame_pool_stats st;
};

int frame_pool_create(uint64_t limit_bytes, frame_pool **out)
{
    if (out == NULL)
        return TSDF_EINVAL;
    *out = NULL;
    if (limit_bytes == 0)
        return TSDF_EINVAL;
    frame_pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return TSDF_ENOMEM;
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return TSDF_ENOMEM;
    }
    p->st.limit_bytes = limit_bytes;
    p->st.page_locked = tsdf_cuda_available();
    *out = p;
    return TSDF_OK;
}

static void free_list(buf_hdr *h)
{
    while (h != NULL) {
        buf_hdr *next = h->next;
        h->magic = 0;
        tsdf_host_free(h);
        h = next;
    }
}

void frame_pool_destroy(frame_pool *p)
{
    if (p == NULL)
        return;
    free_list(p->kept);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void *frame_pool_get(frame_pool *p, size_t bytes)
{
    if (p == NULL || bytes == 0 || bytes > SIZE_MAX - FRAME_POOL_GRANULE - BUF_HEADER)
        return NULL;
    const size_t cap = (bytes + FRAME_POOL_GRANULE - 1) / FRAME_POOL_GRANULE * FRAME_POOL_GRANULE;
    buf_hdr *freed = NULL;

    pthread_mutex_lock(&p->lock);
    /* The smallest kept buffer that fits: with frames and raycast images
     * in one pool, the first that fits was often a raycast's 4.9 MB,
     * which a 640 KB frame took, so that the next raycast page-locked a
     * new one. */
    buf_hdr **best = NULL;
    for (buf_hdr **link = &p->kept; *link != NULL; link = &(*link)->next)
        if ((*link)->cap >= bytes && (best == NULL || (*link)->cap < (*best)->cap))
            best = link;
    if (best != NULL) {
        buf_hdr *h = *best;
        *best = h->next;
        h->next = NULL;
        p->st.bytes_kept -= h->cap;
        p->st.bytes_out += h->cap;
        p->st.gets++;
        pthread_mutex_unlock(&p->lock);
        return (char *)h + BUF_HEADER;
    }
    /* None fits. One the limit cannot hold even with every kept buffer
     * freed is refused with them kept: freeing them would only cost the
     * next requests their buffers. */
    if (p->st.bytes_out + cap > p->st.limit_bytes) {
        p->st.fallbacks++;
        pthread_mutex_unlock(&p->lock);
        return NULL;
    }
    /* Make room for a new one by freeing kept ones. */
    while (p->kept != NULL && p->st.bytes_out + p->st.bytes_kept + cap > p->st.limit_bytes) {
        buf_hdr *h = p->kept;
        p->kept = h->next;
        p->st.bytes_kept -= h->cap;
        h->next = freed;
        freed = h;
    }
    int room = p->st.bytes_out + p->st.bytes_kept + cap <= p->st.limit_bytes;
    if (room)
        p->st.bytes_out += cap; /* reserved while it is allocated */
    else
        p->st.fallbacks++;
    pthread_mutex_unlock(&p->lock);
    free_list(freed);
    if (!room)
        return NULL;

    void *base = NULL;
    int rc = tsdf_host_alloc(cap + BUF_HEADER, &base);
    pthread_mutex_lock(&p->lock);
    if (rc != TSDF_OK) {
        p->st.bytes_out -= cap;
        p->st.fallbacks++;
    } else {
        p->st.gets++;
        p->st.allocations++;
    }
    pthread_mutex_unlock(&p->lock);
    if (rc != TSDF_OK)
        return NULL;
    buf_hdr *h = base;
    h->magic = BUF_MAGIC;
    h->cap = cap;
    h->next = NULL;
    return (char *)h + BUF_HEADER;
}

void frame_pool_put(frame_pool *p, void *buf)
{
    if (p == NULL || buf == NULL)
        return;
    buf_hdr *h = (buf_hdr *)((char *)buf - BUF_HEADER);
    if (h->magic != BUF_MAGIC)
        abort(); /* not this pool's: keeping it would corrupt the list */
    pthread_mutex_lock(&p->lock);
    p->st.bytes_out -= h->cap;
    p->st.bytes_kept += h->cap;
    h->next = p->kept;
    p->kept = h;
    pthread_mutex_unlock(&p->lock);
}

void frame_pool_get_stats(frame_pool *p, frame_pool_stats *out)
{
    if (p == NULL || out == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    *out = p->st;
    pthread_mutex_unlock(&p->lock);
}
