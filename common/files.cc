#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace drover {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    auto msg = absl::StrCat("cannot read ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, n);
  }
  ::close(fd);
  return out;
}

absl::StatusOr<std::string> ReadOwnerOnlyFile(const std::string& path,
                                              const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(what, " ", path, " does not exist"));
  }
  if (st.st_mode & 077) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, " ", path, " is readable by others (mode octal ", (st.st_mode >> 6) & 7,
        (st.st_mode >> 3) & 7, st.st_mode & 7, "); run `chmod 600 ", path, "`"));
  }
  return ReadFile(path);
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& contents,
                             int mode) {
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  }
  ::fchmod(fd, mode);
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(err)));
    }
    done += n;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path, int mode) {
  if (path.empty()) return absl::OkStatus();
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create directory ", cur, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_size;
}

std::string TailFile(const std::string& path, int64_t from_offset, int64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return "";
  }
  int64_t start = st.st_size - max_bytes;
  bool cut = start > from_offset;
  if (start < from_offset) start = from_offset;
  if (start >= st.st_size) {
    ::close(fd);
    return "";
  }
  std::string out(st.st_size - start, '\0');
  ssize_t n = ::pread(fd, out.data(), out.size(), start);
  ::close(fd);
  out.resize(n < 0 ? 0 : n);
  if (cut) {
    size_t nl = out.find('\n');
    if (nl != std::string::npos && nl + 1 < out.size()) out = out.substr(nl + 1);
  }
  return out;
}

}  // namespace drover
