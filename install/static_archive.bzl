"""static_archive: one .a with every object of a cc_library's transitive repo deps.

For programs built without Bazel (scripts/install.sh): `lib<name>.a` merges the
archives (PIC where Bazel built them so) of every library `deps` pull in, and
`<name>.linkflags` / `<name>.defines` list, one a line, the link flags of the system
libraries they name (@system's) and the preprocessor defines their headers need.
"""

def _static_archive_impl(ctx):
    archives = []
    objects = []
    flags = []
    defines = []
    for dep in ctx.attr.deps:
        cc = dep[CcInfo]
        defines += cc.compilation_context.defines.to_list()
        for linker_input in cc.linking_context.linker_inputs.to_list():
            flags += linker_input.user_link_flags
            for lib in linker_input.libraries:
                if lib.pic_static_library:
                    archives.append(lib.pic_static_library)
                elif lib.static_library:
                    archives.append(lib.static_library)
                elif lib.pic_objects:
                    objects += lib.pic_objects
                elif lib.objects:
                    objects += lib.objects
    out = ctx.actions.declare_file("lib%s.a" % ctx.label.name)
    # ar's MRI script: one archive from the members of all of them (duplicate member
    # names, e.g. two client.o, are kept: the linker goes by the symbol index).
    script = ctx.actions.declare_file("%s.mri" % ctx.label.name)
    lines = ["create " + out.path]
    lines += ["addlib " + a.path for a in archives]
    lines += ["addmod " + o.path for o in objects]
    lines += ["save", "end"]
    ctx.actions.write(script, "\n".join(lines) + "\n")
    ctx.actions.run_shell(
        inputs = archives + objects + [script],
        outputs = [out],
        command = "rm -f {out} && ar -M < {script} && ranlib {out}".format(
            out = out.path,
            script = script.path,
        ),
        mnemonic = "StaticArchive",
        progress_message = "Merging %d archives into %s" % (len(archives), out.short_path),
    )
    linkflags = ctx.actions.declare_file("%s.linkflags" % ctx.label.name)
    ctx.actions.write(linkflags, "\n".join(flags) + "\n")
    defines_file = ctx.actions.declare_file("%s.defines" % ctx.label.name)
    seen = {}
    unique_defines = []
    for d in defines:
        if d not in seen:
            seen[d] = True
            unique_defines.append(d)
    ctx.actions.write(defines_file, "\n".join(unique_defines) + "\n")
    return [DefaultInfo(files = depset([out, linkflags, defines_file]))]

static_archive = rule(
    implementation = _static_archive_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
    },
)
