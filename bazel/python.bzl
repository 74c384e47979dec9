"""drover_python_extension: a CPython extension module built from C++ (pybind11).

    drover_python_extension(
        name = "drover",             # P:drover, the file P/drover.so (`import drover`)
        srcs = ["drover_module.cc"],
        deps = ["//sdk:tasks", ...],
        version_script = "drover.lds",
        stub = "drover.pyi.in",        # installed as P/drover.pyi
    )

An extension is a shared object, so everything linked into it must be
position-independent: Bazel compiles every cc_library both ways where a shared object
needs it (the .pic.o that `bazel build //...` makes anyway for each library's .so), and
the module links those, from the same configuration as drover's binaries, so the SDK
is compiled once for both (no configuration of its own). Debian's static archives of
Abseil, protobuf and re2 are not usable in a shared object (thread-local storage of the
local-exec model, R_X86_64_TPOFF32): the link keeps drover's own libraries and takes
@system's as Debian's shared objects instead (the same -l names, without
-Wl,-Bstatic). The module needs those shared objects at run time (the packages
scripts/setup.sh installs), not libpython. The version script keeps every symbol but
PyInit_<module> local, so the copies of gRPC and drover inside cannot collide with
another extension's (torch's) symbols.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

# The flags @system's static groups carry (bazel/system_libs.bzl), made to link
# Debian's shared objects of the same libraries instead.
_STATIC_ONLY_FLAGS = ["-Wl,-Bstatic", "-Wl,-Bdynamic", "-Wl,--start-group", "-Wl,--end-group"]

def _shared_system_flags(flags):
    return [f for f in flags if f not in _STATIC_ONLY_FLAGS]

def _python_module_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    linker_inputs = []
    for dep in ctx.attr.deps:
        for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list():
            flags = linker_input.user_link_flags
            if linker_input.owner.workspace_name == "system":
                flags = _shared_system_flags(flags)
            linker_inputs.append(cc_common.create_linker_input(
                owner = linker_input.owner,
                libraries = depset(linker_input.libraries),
                user_link_flags = depset(flags),
                additional_inputs = depset(linker_input.additional_inputs),
            ))
    link_flags = []
    extra_inputs = []
    if ctx.file.version_script:
        link_flags.append("-Wl,--version-script=" + ctx.file.version_script.path)
        extra_inputs.append(ctx.file.version_script)
    linked = cc_common.link(
        actions = ctx.actions,
        feature_configuration = features,
        cc_toolchain = cc_toolchain,
        # linker_inputs.to_list() lists a library's dependencies before it; the link
        # wants each library before what it uses.
        linking_contexts = [cc_common.create_linking_context(
            linker_inputs = depset(linker_inputs, order = "topological"),
        )],
        user_link_flags = link_flags,
        additional_inputs = extra_inputs,
        name = ctx.label.name + "_ext",
        output_type = "dynamic_library",
    )
    shared = linked.library_to_link.resolved_symlink_dynamic_library or linked.library_to_link.dynamic_library
    out = ctx.actions.declare_file(ctx.attr.module + ".so")
    ctx.actions.symlink(output = out, target_file = shared)
    outs = [out]
    if ctx.file.stub:
        # The type stub beside the module, where type checkers and IDEs look for it.
        pyi = ctx.actions.declare_file(ctx.attr.module + ".pyi")
        ctx.actions.symlink(output = pyi, target_file = ctx.file.stub)
        outs.append(pyi)
    return [DefaultInfo(files = depset(outs), runfiles = ctx.runfiles(files = outs + [shared]))]

_python_module = rule(
    implementation = _python_module_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo], mandatory = True),
        "module": attr.string(mandatory = True),
        "stub": attr.label(allow_single_file = [".pyi.in", ".pyi"]),
        "version_script": attr.label(allow_single_file = True),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)

def drover_python_extension(name, srcs, deps = [], version_script = None, stub = None, visibility = None, copts = []):
    # The module's own code; alwayslink, so PyInit_<name> is in the link whatever refers
    # to it. Manual: built only for the module (its .pic.o), not by //... on its own.
    native.cc_library(
        name = name + "_srcs",
        srcs = srcs,
        copts = copts,
        deps = deps + ["@system//:python"],
        alwayslink = True,
        tags = ["manual"],
        visibility = ["//visibility:private"],
    )
    _python_module(
        name = name,
        deps = [":" + name + "_srcs"],
        module = name,
        stub = stub,
        version_script = version_script,
        visibility = visibility,
    )
