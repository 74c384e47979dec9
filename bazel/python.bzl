"""drover_python_extension: a CPython extension module built from C++ (pybind11).

    drover_python_extension(
        name = "drover",             # P:drover, the file P/drover.so (`import drover`)
        srcs = ["drover_module.cc"],
        deps = ["//sdk:tasks", ...],
        version_script = "drover.lds",
        stub = "drover.pyi.in",        # installed as P/drover.pyi
    )

An extension is a shared object, so everything linked into it must be
position-independent. Bazel compiles drover's own code with -fPIC for a linkshared
cc_binary, but Debian's static archives of Abseil, protobuf and re2 are not usable in a
shared object (thread-local storage of the local-exec model, R_X86_64_TPOFF32), so
@system's libraries, static everywhere else, link as Debian's shared objects here: the
module is built through a configuration transition that sets //bazel:system_linkage to
"shared", which @system's targets select on (bazel/system_libs.bzl). The module needs
those shared objects at run time (the packages scripts/setup.sh installs), not libpython.
The version script keeps every symbol but PyInit_<module> local, so the copies of gRPC
and drover inside cannot collide with another extension's (torch's) symbols.
"""

def _system_linkage_impl(ctx):
    return []

# "static" (default) or "shared": how @system's libraries are linked.
system_linkage = rule(
    implementation = _system_linkage_impl,
    build_setting = config.string(flag = True),
)

_LINKAGE = str(Label("//bazel:system_linkage"))

def _shared_linkage_transition_impl(settings, attr):
    return {_LINKAGE: "shared"}

_shared_linkage_transition = transition(
    implementation = _shared_linkage_transition_impl,
    inputs = [],
    outputs = [_LINKAGE],
)

def _python_module_impl(ctx):
    shared = [f for f in ctx.attr.binary[0][DefaultInfo].files.to_list() if f.extension == "so"]
    if len(shared) != 1:
        fail("%s: expected one .so from %s" % (ctx.label, ctx.attr.binary[0].label))
    out = ctx.actions.declare_file(ctx.attr.module + ".so")
    ctx.actions.symlink(output = out, target_file = shared[0])
    outs = [out]
    if ctx.file.stub:
        # The type stub beside the module, where type checkers and IDEs look for it.
        pyi = ctx.actions.declare_file(ctx.attr.module + ".pyi")
        ctx.actions.symlink(output = pyi, target_file = ctx.file.stub)
        outs.append(pyi)
    return [DefaultInfo(files = depset(outs), runfiles = ctx.runfiles(files = outs + [shared[0]]))]

_python_module = rule(
    implementation = _python_module_impl,
    attrs = {
        "binary": attr.label(cfg = _shared_linkage_transition, mandatory = True),
        "module": attr.string(mandatory = True),
        "stub": attr.label(allow_single_file = [".pyi.in", ".pyi"]),
        "_allowlist_function_transition": attr.label(
            default = "@bazel_tools//tools/allowlists/function_transition_allowlist",
        ),
    },
)

def drover_python_extension(name, srcs, deps = [], version_script = None, stub = None, visibility = None, **kwargs):
    linkopts = []
    inputs = []
    if version_script:
        linkopts = ["-Wl,--version-script=$(location %s)" % version_script]
        inputs = [version_script]
    native.cc_binary(
        name = name + "_ext.so",
        srcs = srcs,
        deps = deps + ["@system//:python"],
        linkshared = True,
        linkopts = linkopts,
        additional_linker_inputs = inputs,
        # Only through the transition below: in the default configuration the static
        # archives of @system cannot be linked into a shared object.
        tags = ["manual"],
        visibility = ["//visibility:private"],
        **kwargs
    )
    _python_module(
        name = name,
        binary = ":" + name + "_ext.so",
        module = name,
        stub = stub,
        visibility = visibility,
    )
