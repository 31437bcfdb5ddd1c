/* imagefile.c — reads camera images for `pi0 run`: JPEG through TurboJPEG with its defaults (accurate
 * integer DCT, fancy upsampling: what Pillow's libjpeg-turbo does, so pixels equal Pillow's), greyscale
 * expanded to RGB, CMYK refused; PNG through libspng, any 8-bit colour type converted to RGB with alpha
 * dropped and no gamma applied (Pillow's convert("RGB")); 16-bit greyscale is refused (Pillow would clip
 * it). Sides up to 8192 pixels, files up to 256 MB. Decoding only: resizing is the library's job. */
#include "imagefile.h"

#include <errno.h>
#include <fcntl.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#define MAX_SIDE 8192
#define MAX_FILE (256u << 20)

static int fail(char *err, size_t n, const char *path, const char *msg, const char *detail) {
    snprintf(err, n, "%s: %s%s%s", path, msg, detail ? ": " : "", detail ? detail : "");
    return -1;
}

static int load_jpeg(const char *path, const uint8_t *buf, size_t len, uint8_t **rgb, int *h, int *w, char *err, size_t n) {
    tjhandle tj = tjInitDecompress();
    if (!tj) return fail(err, n, path, "cannot start the JPEG decoder", NULL);
    int W, H, sub, cs, rc = -1;
    if (tjDecompressHeader3(tj, buf, (unsigned long)len, &W, &H, &sub, &cs) != 0)
        fail(err, n, path, "not a readable JPEG", tjGetErrorStr2(tj));
    else if (cs == TJCS_CMYK || cs == TJCS_YCCK)
        fail(err, n, path, "CMYK JPEG images are not supported (convert to RGB)", NULL);
    else if (W < 1 || H < 1 || W > MAX_SIDE || H > MAX_SIDE)
        fail(err, n, path, "image sides must be 1..8192 pixels", NULL);
    else if (!(*rgb = malloc((size_t)W * H * 3)))
        fail(err, n, path, "out of memory", NULL);
    /* warnings fail too (truncated data); LIMITSCANS: a progressive JPEG of thousands of tiny scans is refused (500
       at most) rather than decoded for minutes */
    else if (tjDecompress2(tj, buf, (unsigned long)len, *rgb, W, 0, H, TJPF_RGB, TJFLAG_LIMITSCANS) != 0) {
        fail(err, n, path, "JPEG decoding failed", tjGetErrorStr2(tj));
        free(*rgb); *rgb = NULL;
    } else { *h = H; *w = W; rc = 0; }
    tjDestroy(tj);
    return rc;
}

static int load_png(const char *path, const uint8_t *buf, size_t len, uint8_t **rgb, int *h, int *w, char *err, size_t n) {
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) return fail(err, n, path, "cannot start the PNG decoder", NULL);
    struct spng_ihdr ihdr;
    size_t size = 0;
    uint8_t *rgba = NULL;
    int rc = -1, e;
    spng_set_image_limits(ctx, MAX_SIDE, MAX_SIDE);
    spng_set_chunk_limits(ctx, 64u << 20, 64u << 20);
    if ((e = spng_set_png_buffer(ctx, buf, len)) || (e = spng_get_ihdr(ctx, &ihdr)))
        fail(err, n, path, "not a readable PNG", spng_strerror(e));
    else if (ihdr.bit_depth == 16 && (ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE || ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA))
        fail(err, n, path, "16-bit greyscale PNG images are not supported (convert to 8-bit)", NULL);
    else if ((e = spng_decoded_image_size(ctx, SPNG_FMT_RGBA8, &size)))
        fail(err, n, path, "PNG size", spng_strerror(e));
    else if (!(rgba = malloc(size)) || !(*rgb = malloc((size_t)ihdr.width * ihdr.height * 3)))
        fail(err, n, path, "out of memory", NULL);
    else if ((e = spng_decode_image(ctx, rgba, size, SPNG_FMT_RGBA8, 0))) {
        fail(err, n, path, "PNG decoding failed", spng_strerror(e));
        free(*rgb); *rgb = NULL;
    } else {
        size_t px = (size_t)ihdr.width * ihdr.height;
        for (size_t i = 0; i < px; i++) memcpy(*rgb + i * 3, rgba + i * 4, 3);
        *h = (int)ihdr.height; *w = (int)ihdr.width; rc = 0;
    }
    free(rgba);
    spng_ctx_free(ctx);
    return rc;
}

int imagefile_load(const char *path, uint8_t **rgb, int *h, int *w, char *err, size_t errlen) {
    *rgb = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK);   /* a FIFO must not block: only regular files are read */
    struct stat sb;
    if (fd < 0) return fail(err, errlen, path, "cannot open", strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) { close(fd); return fail(err, errlen, path, "cannot open", "not a regular file"); }
    FILE *f = fdopen(fd, "rb");
    if (!f) { close(fd); return fail(err, errlen, path, "cannot open", strerror(errno)); }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len == cap) {
            uint8_t *nb = cap < MAX_FILE ? realloc(buf, cap = cap ? cap * 2 : 1u << 16) : NULL;
            if (!nb) { free(buf); fclose(f); return fail(err, errlen, path, "file too large (256 MB at most) or out of memory", NULL); }
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    int rd_err = ferror(f);
    fclose(f);
    int rc = rd_err ? fail(err, errlen, path, "read error", NULL) : imagefile_decode(path, buf, len, rgb, h, w, err, errlen);
    free(buf);
    return rc;
}

int imagefile_decode(const char *label, const uint8_t *buf, size_t len, uint8_t **rgb, int *h, int *w, char *err, size_t errlen) {
    *rgb = NULL;
    if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) return load_jpeg(label, buf, len, rgb, h, w, err, errlen);
    if (len >= 8 && !memcmp(buf, "\x89PNG\r\n\x1a\n", 8)) return load_png(label, buf, len, rgb, h, w, err, errlen);
    return fail(err, errlen, label, "not a JPEG or PNG file", NULL);
}
