"""drover_dependencies(): every repository drover's BUILD files refer to, declared once.

Drover's own WORKSPACE calls it, and so does any workspace that uses drover as an
external repository:

    local_repository(name = "drover", path = "/path/to/drover")   # or an http_archive
    load("@drover//bazel:deps.bzl", "drover_dependencies")
    drover_dependencies()

Labels such as `@system//:absl` in drover's BUILD files resolve in the *main*
workspace, so the main workspace must declare these repositories, under these names:

  @system         Debian's Abseil, gRPC, protobuf, hiredis, OpenSSL, msgpack and
                  GoogleTest as cc_library targets (link flags from pkg-config; static
                  archives: the Python module takes them as shared objects), and
                  Python's headers.
  @local_cuda     the CUDA Toolkit's headers under /usr/local/cuda (fetched only when
                  a GPU target is built).
  @rules_cc, @rules_java, @remote_coverage_tools
                  drover's offline stand-ins (third_party/). Bazel 4.2.3's WORKSPACE
                  suffix loads them and would otherwise try to download them.

A repository the workspace declared before the call is left alone (e.g. real rules_cc).
Call it early in WORKSPACE, before anything that loads @rules_cc or @rules_java.
"""

load(":system_libs.bzl", "system_libs")

def _in_tree_repository_impl(ctx):
    # The stand-in's directory in drover's checkout, wherever that is: found through a
    # label of drover's own repository, so the path works from any main workspace.
    src = ctx.path(ctx.attr.marker).dirname
    for child in src.readdir():
        ctx.symlink(child, child.basename)

# A repository whose files are a directory of drover's source tree (a local_repository
# whose path is relative to drover, not to the main workspace).
_in_tree_repository = repository_rule(
    implementation = _in_tree_repository_impl,
    attrs = {
        "marker": attr.label(mandatory = True, allow_single_file = True),
    },
    local = True,
)

def _maybe(rule, name, **kwargs):
    if not native.existing_rule(name):
        rule(name = name, **kwargs)

def drover_dependencies():
    """Declares @system, @local_cuda, @rules_cc, @rules_java and @remote_coverage_tools."""
    for stand_in in ["rules_cc", "rules_java", "remote_coverage_tools"]:
        _maybe(
            _in_tree_repository,
            name = stand_in,
            marker = Label("//third_party/%s:WORKSPACE" % stand_in),
        )
    _maybe(system_libs, name = "system")
    _maybe(
        native.new_local_repository,
        name = "local_cuda",
        build_file = str(Label("//third_party:local_cuda.BUILD")),
        path = "/usr/local/cuda",
    )
