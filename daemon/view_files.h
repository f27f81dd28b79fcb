/*
 * view_files.h - the live view's static files: which URL serves which
 * file, and reading one (bounded).
 *
 *   /                         <web_dir>/index.html
 *   /NAME.EXT                 <web_dir>/NAME.EXT, NAME of [A-Za-z0-9_-], EXT one
 *                             of html, js, css, png, svg, ico
 *   /three/three.min.js       <three_dir>/three.min.js
 *   /three/OrbitControls.js   <three_dir>/examples/js/controls/OrbitControls.js
 *
 * Nothing else maps to a file: no sub-folders, no dots but the extension's,
 * so that no URL reaches outside the two folders.
 *
 * Threads: pure functions; view_files_read does blocking I/O (the live
 * view calls it on libuv's thread pool).
 */
#ifndef TSDFD_VIEW_FILES_H
#define TSDFD_VIEW_FILES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest file served (three.min.js is about 600 KiB). */
#define VIEW_FILES_MAX_BYTES (8u * 1024u * 1024u)

/* 1 and the file's path and Content-Type when url_path (without its
 * query) names a file of the view; 0 otherwise (also when the path would
 * not fit path_len). */
int view_files_resolve(const char *url_path, const char *web_dir, const char *three_dir, char *path,
                       size_t path_len, const char **content_type);

/*
 * Where the page is: the first of these folders that holds index.html.
 *   configured   [metrics] web_dir when set (then only it);
 *   installed    <the daemon's folder>/../share/tsdfd/web, so an install
 *                under any prefix (cmake --install --prefix P) finds the
 *                page it installed beside itself;
 *   prefix       the install folder the build was configured for;
 *   source       the source tree's web/, for a daemon run from its build
 *                tree.
 * 1 and the folder in out when one holds the page; 0 with every folder
 * looked in listed in tried (", "-separated) otherwise.
 */
int view_files_find_web_dir(const char *configured, const char *prefix_dir, const char *source_dir,
                            char *out, size_t out_len, char *tried, size_t tried_len);

/* Reads the file at path into *out (malloc'ed; the caller frees it).
 * TSDF_OK, TSDF_ENOT_FOUND (no such file, or not a plain file),
 * TSDF_ETOO_LARGE (over max_bytes), TSDF_EIO, TSDF_ENOMEM. */
int view_files_read(const char *path, size_t max_bytes, char **out, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_VIEW_FILES_H */
