"""drover_proto_library: protoc + grpc_cpp_plugin from the system, wrapped as a cc_library."""

def drover_proto_library(name, srcs, deps = [], grpc = False, visibility = None):
    """Generates C++ (and optionally gRPC) code for `srcs` and compiles it.

    Args:
      name: the cc_library to create.
      srcs: .proto files in this package, imported as "proto/<file>".
      deps: other drover_proto_library targets whose .proto files are imported.
      grpc: also generate service stubs.
      visibility: passed to the cc_library.
    """
    outs = []
    hdrs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.cc", base + ".pb.h"]
        hdrs.append(base + ".pb.h")
        if grpc:
            outs += [base + ".grpc.pb.cc", base + ".grpc.pb.h"]
            hdrs.append(base + ".grpc.pb.h")
    # The .proto files import each other as "proto/<file>", relative to the root of the
    # repository that holds them: "." in drover's own workspace, external/drover when
    # drover is an external repository. Output goes under the same root of GENDIR.
    repo = native.repository_name()
    root = "." if repo == "@" else "external/" + repo[1:]
    out_dir = "$(GENDIR)" if repo == "@" else "$(GENDIR)/" + root
    plugin = ""
    if grpc:
        plugin = "--grpc_out=%s --plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin) " % out_dir
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = "protoc -I%s --cpp_out=%s " % (root, out_dir) + plugin +
              " ".join(["$(location %s)" % s for s in srcs]),
    )
    native.filegroup(name = name + "_srcs", srcs = srcs + [d + "_srcs" for d in deps])
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = hdrs,
        deps = deps + ["@system//:grpc"],
        visibility = visibility,
    )
