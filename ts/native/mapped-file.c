/*
 * mapFile(fd, length) -> ArrayBuffer over a shared, writable mapping of the file.
 * allocate(fd, length): reserve the file's blocks up to `length` (posix_fallocate).
 *
 * Why native: the sender's spool file is the batch's durable copy, and writing
 * a framed batch into it with write() copies every byte a second time (the
 * first copy assembles the frame). Writing the frame straight into the file's
 * mapped pages makes that one copy; ZeroMQ then sends from the same pages.
 * Node has no mmap of its own. The mapping is released (munmap) when the
 * ArrayBuffer is garbage-collected; the file descriptor stays the caller's.
 * A store into a mapped page the file system cannot back (disk or tmpfs full)
 * is a SIGBUS, not an error, so callers reserve the blocks with allocate()
 * first: a full disk then throws ENOSPC like write() would.
 */
#define NAPI_VERSION 8
#include <node_api.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>

static void unmap(napi_env env, void* data, void* length) {
  (void)env;
  munmap(data, (size_t)(uintptr_t)length);
}

/* Reads (fd, length) into *fd and *length; on bad arguments throws a TypeError naming `call` and returns 0. */
static int fd_and_length(napi_env env, napi_callback_info info, const char* call, int32_t* fd, int64_t* length) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 2 ||
      napi_get_value_int32(env, argv[0], fd) != napi_ok || napi_get_value_int64(env, argv[1], length) != napi_ok ||
      *fd < 0 || *length <= 0) {
    char message[128];
    snprintf(message, sizeof message, "%s(fd, length) needs a file descriptor and a positive length", call);
    napi_throw_type_error(env, NULL, message);
    return 0;
  }
  return 1;
}

static napi_value map_file(napi_env env, napi_callback_info info) {
  int32_t fd;
  int64_t length;
  if (!fd_and_length(env, info, "mapFile", &fd, &length)) return NULL;
  /* MAP_POPULATE: the pages a reused spool file already has are mapped in one call, not faulted one by one. */
  void* data = mmap(NULL, (size_t)length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (data == MAP_FAILED) {
    char message[160];
    snprintf(message, sizeof message, "mmap of fd %d (%lld bytes) failed: %s", fd, (long long)length, strerror(errno));
    napi_throw_error(env, NULL, message);
    return NULL;
  }
  napi_value buffer;
  if (napi_create_external_arraybuffer(env, data, (size_t)length, unmap, (void*)(uintptr_t)length, &buffer) != napi_ok) {
    munmap(data, (size_t)length);
    napi_throw_error(env, NULL, "this runtime does not allow external ArrayBuffers");
    return NULL;
  }
  return buffer;
}

static napi_value allocate(napi_env env, napi_callback_info info) {
  int32_t fd;
  int64_t length;
  if (!fd_and_length(env, info, "allocate", &fd, &length)) return NULL;
  int error = posix_fallocate(fd, 0, (off_t)length); /* returns the error number, does not set errno */
  if (error != 0) {
    char message[160];
    snprintf(message, sizeof message, "%s: reserving %lld bytes of a spool file failed: %s",
             error == ENOSPC ? "ENOSPC" : "EIO", (long long)length, strerror(error));
    napi_throw_error(env, error == ENOSPC ? "ENOSPC" : "EIO", message);
    return NULL;
  }
  return NULL;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  if (napi_create_function(env, "mapFile", NAPI_AUTO_LENGTH, map_file, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "mapFile", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "allocate", NAPI_AUTO_LENGTH, allocate, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "allocate", fn) != napi_ok) return NULL;
  return exports;
}
