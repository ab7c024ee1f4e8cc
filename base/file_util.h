// Reading files an attacker may control (models, their external data, tensor files, flag files) without
// blocking, without reading more than a bound, and without leaving a directory (docs/security.md); and
// writing output files (traces, dumps) so that a reader never sees a partial one.
//
// Every function returns an error that names the path and what is wrong; nothing here follows a symlink out
// of its base directory, opens a FIFO, device or directory as data, or reads unbounded input.
// Thread-safety: all functions are reentrant.
#ifndef CJIT_BASE_FILE_UTIL_H_
#define CJIT_BASE_FILE_UTIL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cjit {

// Opens `path` for reading if it is a regular file (opened with O_NONBLOCK so a FIFO cannot block the open;
// directories, FIFOs, sockets and devices are refused after fstat). Returns the descriptor; *size gets the
// file's size. `what` names the file in errors ("model file", "flags file").
absl::StatusOr<int> OpenRegularFile(const std::string& path, absl::string_view what, int64_t* size);

// OpenRegularFile of a file of at most `max_bytes` bytes: a larger one is an InvalidArgumentError naming
// its size and the bound (and the descriptor is closed).
absl::StatusOr<int> OpenBoundedRegularFile(const std::string& path, int64_t max_bytes, absl::string_view what,
                                           int64_t* size);

// Reads a whole regular file of at most `max_bytes` bytes (OpenRegularFile, then a bounded read).
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes, absl::string_view what);

// Opens `relative` for reading beneath the directory `dir` ("" = the current directory): the path is
// resolved with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) so that neither "..", an absolute path, nor
// a symlink (file or directory, anywhere on the path) can lead outside `dir`; symlinks that stay inside
// are followed. Where the kernel has no openat2 (before Linux 5.6), every component is opened with
// O_NOFOLLOW instead (no symlinks at all). Only regular files are accepted. *size gets the file's size.
absl::StatusOr<int> OpenFileBeneath(const std::string& dir, const std::string& relative, absl::string_view what,
                                    int64_t* size);

// Reads exactly `bytes` bytes at `offset` from `fd` into `out` (pread, retrying short reads):
// DataLossError when the file ends first.
absl::Status ReadExactly(int fd, int64_t offset, void* out, size_t bytes, absl::string_view what);

// Writes `contents` to `path` through a hidden temporary file in the same directory (".<name>.tmp-XXXXXX",
// mode 0644) and a rename: readers see the old file or the whole new one. Errors name the path.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace cjit

#endif  // CJIT_BASE_FILE_UTIL_H_
