#include "tsdf_error.h"

const char *tsdf_strerror(int err)
{
    switch (err) {
    case TSDF_OK:
        return "success";
#define TSDF_ERR_MSG_(name, value, msg)                                                            \
    case value:                                                                                    \
        return msg;
        TSDF_ERRNO_MAP(TSDF_ERR_MSG_)
#undef TSDF_ERR_MSG_
    default:
        return "unknown error";
    }
}

const char *tsdf_errname(int err)
{
    switch (err) {
    case TSDF_OK:
        return "OK";
#define TSDF_ERR_NAME_(name, value, msg)                                                           \
    case value:                                                                                    \
        return #name;
        TSDF_ERRNO_MAP(TSDF_ERR_NAME_)
#undef TSDF_ERR_NAME_
    default:
        return "UNKNOWN";
    }
}
