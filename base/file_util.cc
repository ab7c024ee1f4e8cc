#include "base/file_util.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cjit {
namespace {

absl::Status ErrnoError(int err, absl::string_view what, const std::string& path) {
  std::string text = absl::StrCat("cannot open ", what, " ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(text);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(text);
  return absl::InvalidArgumentError(text);
}

// The descriptor if it is a regular file (closing it otherwise).
absl::StatusOr<int> RequireRegular(int fd, absl::string_view what, const std::string& path, int64_t* size) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError(err, what, path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* kind = S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : S_ISSOCK(st.st_mode) ? "a socket"
                                                                                               : "not a regular file";
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is ", kind, ", not a regular file"));
  }
  // Back to blocking reads (O_NONBLOCK only guarded the open).
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (size) *size = static_cast<int64_t>(st.st_size);
  return fd;
}

}  // namespace

absl::StatusOr<int> OpenRegularFile(const std::string& path, absl::string_view what, int64_t* size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ErrnoError(errno, what, path);
  return RequireRegular(fd, what, path, size);
}

absl::StatusOr<int> OpenBoundedRegularFile(const std::string& path, int64_t max_bytes, absl::string_view what,
                                           int64_t* size) {
  absl::StatusOr<int> fd = OpenRegularFile(path, what, size);
  if (!fd.ok()) return fd.status();
  if (*size > max_bytes) {
    ::close(*fd);
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, " has ", *size, " bytes, more than the ", max_bytes, " allowed"));
  }
  return fd;
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes, absl::string_view what) {
  int64_t size = 0;
  absl::StatusOr<int> fd = OpenBoundedRegularFile(path, max_bytes, what, &size);
  if (!fd.ok()) return fd.status();
  std::string out(static_cast<size_t>(size), '\0');
  absl::Status st = ReadExactly(*fd, 0, out.data(), out.size(), absl::StrCat(what, " ", path));
  ::close(*fd);
  if (!st.ok()) return st;
  return out;
}

absl::StatusOr<int> OpenFileBeneath(const std::string& dir, const std::string& relative, absl::string_view what,
                                    int64_t* size) {
  std::string shown = dir.empty() ? relative : absl::StrCat(dir, "/", relative);
  if (relative.empty() || relative[0] == '/') {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", relative, "' must be a relative path"));
  }
  int dirfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) return ErrnoError(errno, "directory", dir.empty() ? "." : dir);
  struct open_how how;
  std::memset(&how, 0, sizeof how);
  how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd = ::syscall(SYS_openat2, dirfd, relative.c_str(), &how, sizeof how);
  if (fd < 0 && errno == ENOSYS) {
    // No openat2: walk the components with O_NOFOLLOW (no symlinks) and refuse "..".
    std::vector<std::string> parts = absl::StrSplit(relative, '/', absl::SkipEmpty());
    int cur = ::dup(dirfd);
    fd = -1;
    errno = 0;
    for (size_t i = 0; i < parts.size() && cur >= 0; ++i) {
      if (parts[i] == "..") {
        ::close(cur);
        cur = -1;
        errno = EXDEV;
        break;
      }
      bool last = i + 1 == parts.size();
      int next = ::openat(cur, parts[i].c_str(),
                          (last ? O_RDONLY | O_NONBLOCK | O_NOCTTY : O_RDONLY | O_DIRECTORY) | O_NOFOLLOW | O_CLOEXEC);
      int err = errno;
      ::close(cur);
      cur = next;
      errno = err;
      if (last) fd = next;
    }
  }
  int err = errno;
  ::close(dirfd);
  if (fd < 0) {
    if (err == EXDEV || err == ELOOP) {
      return absl::PermissionDeniedError(absl::StrCat(what, " ", shown, " resolves outside ",
                                                      dir.empty() ? "the current directory" : dir,
                                                      " (through '..', an absolute path or a symlink): refused"));
    }
    return ErrnoError(err, what, shown);
  }
  return RequireRegular(static_cast<int>(fd), what, shown, size);
}

absl::Status ReadExactly(int fd, int64_t offset, void* out, size_t bytes, absl::string_view what) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::pread(fd, static_cast<char*>(out) + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::DataLossError(absl::StrCat("cannot read ", what, ": ", std::strerror(errno)));
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(what, " ends after ", offset + static_cast<int64_t>(done),
                                              " bytes; ", offset + static_cast<int64_t>(bytes), " are needed"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  std::filesystem::path target(path);
  std::filesystem::path dir = target.parent_path().empty() ? std::filesystem::path(".") : target.parent_path();
  std::string tmpl = (dir / absl::StrCat(".", target.filename().string(), ".tmp-XXXXXX")).string();
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create a file in ", dir.string(), ": ", std::strerror(errno)));
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(name.data());
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  ::fchmod(fd, 0644);
  ::close(fd);
  if (::rename(name.data(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(name.data());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace cjit
