/* ebb error codes and diagnostics shared by every module. */
#ifndef EBB_RUNTIME_ERR_H
#define EBB_RUNTIME_ERR_H

#include <stddef.h>

/* One list of error codes; names come from the same table through ebb_err_name(). */
#define EBB_ERR_MAP(X)                                                                             \
    X(EBB_ENOMEM, -1, "out of memory")                                                             \
    X(EBB_EINVAL, -2, "invalid argument")                                                          \
    X(EBB_EIO, -3, "input/output error")                                                           \
    X(EBB_ENOENT, -4, "no such file")                                                              \
    X(EBB_EFORMAT, -5, "malformed file")                                                           \
    X(EBB_EUNSUPPORTED, -6, "unsupported")                                                         \
    X(EBB_ERANGE, -7, "value out of range")                                                        \
    X(EBB_EOVERFLOW, -8, "arithmetic overflow")                                                    \
    X(EBB_ENOTFOUND, -9, "not found")                                                              \
    X(EBB_EDEVICE, -10, "device error")                                                            \
    X(EBB_EBUILD, -11, "kernel build failed")                                                      \
    X(EBB_ECTX, -12, "context length exceeded")                                                    \
    X(EBB_EBUSY, -13, "busy")                                                                      \
    X(EBB_ECANCELED, -14, "canceled")                                                              \
    X(EBB_ENOTIMPL, -15, "not yet implemented")

typedef enum ebb_err {
    EBB_OK = 0,
#define EBB__ERR_ENUM(name, val, msg) name = (val),
    EBB_ERR_MAP(EBB__ERR_ENUM)
#undef EBB__ERR_ENUM
} ebb_err;

/* A human-readable message attached to a failure. Callers may pass NULL where a diag is
 * accepted; functions then only return the code. */
struct ebb_diag {
    char msg[512];
};

/* Returns the symbolic name of an error ("EBB_EFORMAT"), or "EBB_E?" for unknown codes. */
const char *ebb_err_name(ebb_err err);

/* Returns a short English description of an error code. */
const char *ebb_err_str(ebb_err err);

/* Formats a message into diag (if non-NULL) and returns err, so callers can write
 * `return ebb_diag_set(d, EBB_EFORMAT, "tensor %s ...", name);`. */
ebb_err ebb_diag_set(struct ebb_diag *diag, ebb_err err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
