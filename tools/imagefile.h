/* imagefile.h — JPEG / PNG files to uint8 RGB for the CLI (libturbojpeg, libspng). */
#ifndef PI0_IMAGEFILE_H
#define PI0_IMAGEFILE_H

#include <stddef.h>
#include <stdint.h>

/* Decodes path into *rgb (h, w, 3) uint8, malloc'd; 0 on success, else -1 with a message in err. */
int imagefile_load(const char *path, uint8_t **rgb, int *h, int *w, char *err, size_t errlen);
/* The same from bytes in memory (the fuzz target); label names them in messages. */
int imagefile_decode(const char *label, const uint8_t *buf, size_t len, uint8_t **rgb, int *h, int *w, char *err,
                     size_t errlen);

#endif
