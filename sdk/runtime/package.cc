#include "sdk/runtime/package.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/rpc.h"
#include "common/sha256.h"
#include "common/status.h"
#include "common/status_macros.h"

namespace drover::internal {
namespace {

constexpr size_t kChunk = 1 << 20;

// The GNU build id in the notes [p, end) of a PT_NOTE segment, or "".
std::string BuildIdInNotes(const char* p, const char* end) {
  while (p + sizeof(ElfW(Nhdr)) <= end) {
    const auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
    const char* name = p + sizeof(ElfW(Nhdr));
    const char* desc = name + ((n->n_namesz + 3) & ~3u);
    if (desc > end || n->n_descsz > static_cast<size_t>(end - desc)) break;
    if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
      return absl::BytesToHexString(absl::string_view(desc, n->n_descsz));
    }
    p = desc + ((n->n_descsz + 3) & ~3u);
  }
  return "";
}

int FindBuildId(struct dl_phdr_info* info, size_t, void* data) {
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') return 0;  // the main program only
  auto* out = static_cast<std::string*>(data);
  for (int i = 0; i < info->dlpi_phnum && out->empty(); ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    *out = BuildIdInNotes(p, p + ph.p_memsz);
  }
  return 1;
}

}  // namespace

std::string BuildId() {
  static const std::string* id = [] {
    auto* s = new std::string();
    dl_iterate_phdr(FindBuildId, s);
    return s;
  }();
  return *id;
}

absl::StatusOr<std::string> BuildIdOfFile(const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(const std::string f, ReadFile(path));
  ElfW(Ehdr) eh;
  if (f.size() < sizeof(eh) || std::memcmp(f.data(), ELFMAG, SELFMAG) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not an ELF executable"));
  }
  std::memcpy(&eh, f.data(), sizeof(eh));
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phoff > f.size() ||
      uint64_t{eh.e_phnum} * sizeof(ElfW(Phdr)) > f.size() - eh.e_phoff) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a 64-bit ELF executable"));
  }
  for (int i = 0; i < eh.e_phnum; ++i) {
    ElfW(Phdr) ph;
    std::memcpy(&ph, f.data() + eh.e_phoff + i * sizeof(ph), sizeof(ph));
    if (ph.p_type != PT_NOTE || ph.p_offset > f.size() || ph.p_filesz > f.size() - ph.p_offset) continue;
    std::string id = BuildIdInNotes(f.data() + ph.p_offset, f.data() + ph.p_offset + ph.p_filesz);
    if (!id.empty()) return id;
  }
  return std::string();
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

absl::StatusOr<proto::PackageRef> PreparePackage(proto::Leases::Stub* leases,
                                                 const std::string& token, const std::string& program,
                                                 const std::vector<std::string>& argv) {
  std::string exe = program.empty() ? SelfExe() : program;
  if (exe.empty()) return absl::InternalError("cannot resolve /proc/self/exe");
  if (!program.empty()) {
    char resolved[PATH_MAX];
    if (::realpath(program.c_str(), resolved) == nullptr || ::access(resolved, X_OK) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("the worker program ", program, " is not an executable file (",
                                                     std::strerror(errno), ")"));
    }
    exe = resolved;
  }
  struct stat st;
  if (::stat(exe.c_str(), &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat ", exe, ": ", std::strerror(errno)));
  }
  absl::StatusOr<std::string> hash = Sha256File(exe);
  if (!hash.ok()) return hash.status();
  std::string build_id = BuildId();
  if (!program.empty()) {
    DROVER_ASSIGN_OR_RETURN(build_id, BuildIdOfFile(exe));
  }
  proto::PackageRef pkg;
  pkg.set_hash(*hash);
  pkg.set_size(static_cast<uint64_t>(st.st_size));
  pkg.set_build_id(build_id.empty() ? *hash : build_id);
  for (const std::string& a : argv) pkg.add_argv(a);
  if (argv.empty()) pkg.add_argv(exe);
  char cwd[4096];
  if (::getcwd(cwd, sizeof(cwd)) != nullptr) pkg.set_cwd(cwd);

  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token);
    proto::HasPackageRequest req;
    req.set_hash(*hash);
    proto::HasPackageReply reply;
    DROVER_RETURN_IF_ERROR(FromGrpcStatus(leases->HasPackage(&ctx, req, &reply)));
    if (reply.present()) return pkg;
  }
  grpc::ClientContext ctx;
  PrepareContext(&ctx, token, std::chrono::milliseconds(120000));
  proto::PutPackageReply reply;
  std::unique_ptr<grpc::ClientWriter<proto::PackageChunk>> writer =
      leases->PutPackage(&ctx, &reply);
  int fd = ::open(exe.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", exe, ": ", std::strerror(errno)));
  uint64_t offset = 0;
  std::string buf(kChunk, '\0');
  bool ok = true;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    proto::PackageChunk chunk;
    if (offset == 0) {
      chunk.set_hash(*hash);
      chunk.set_total_size(pkg.size());
    }
    chunk.set_offset(offset);
    chunk.set_data(buf.data(), static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
    if (!writer->Write(chunk)) {
      ok = false;
      break;
    }
  }
  ::close(fd);
  if (ok) writer->WritesDone();
  absl::Status s = FromGrpcStatus(writer->Finish());
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("uploading this program (", exe, ", ", pkg.size(),
                                                " bytes) to the cluster failed: ", s.message()));
  }
  return pkg;
}

}  // namespace drover::internal
