#include "err.h"

#include <stdarg.h>
#include <stdio.h>

const char *ebb_err_name(ebb_err err)
{
    switch (err) {
    case EBB_OK:
        return "EBB_OK";
#define EBB__ERR_NAME(name, val, msg)                                                              \
    case name:                                                                                     \
        return #name;
        EBB_ERR_MAP(EBB__ERR_NAME)
#undef EBB__ERR_NAME
    }
    return "EBB_E?";
}

const char *ebb_err_str(ebb_err err)
{
    switch (err) {
    case EBB_OK:
        return "success";
#define EBB__ERR_STR(name, val, msg)                                                               \
    case name:                                                                                     \
        return msg;
        EBB_ERR_MAP(EBB__ERR_STR)
#undef EBB__ERR_STR
    }
    return "unknown error";
}

ebb_err ebb_diag_set(struct ebb_diag *diag, ebb_err err, const char *fmt, ...)
{
    if (diag) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(diag->msg, sizeof(diag->msg), fmt, ap);
        va_end(ap);
    }
    return err;
}
