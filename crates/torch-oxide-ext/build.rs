//! Builds the C++ glue in `<repo>/csrc` (every `*.cpp` in its folders; `csrc/`
//! is the include root, so glue files write `#include "common/oxide.h"`)
//! against the torch that the building interpreter imports, and generates
//! `oxide_abi.h` from `src/abi/` (`mod.rs` and one file per op family).
//!
//! The interpreter is `OXIDE_PYTHON`, else `PYO3_PYTHON` (set by maturin), else
//! `python3`. From it we take torch's include and library paths and the
//! `_GLIBCXX_USE_CXX11_ABI` flag, so the glue always matches the torch it runs with.
//! The glue is linked whole-archive: its static registrations
//! (`TORCH_LIBRARY_IMPL`, `REGISTER_ALLOCATOR`, `C10_REGISTER_GUARD_IMPL`, ...)
//! are referenced by no symbol and would otherwise be dropped by the linker.

use std::path::{Path, PathBuf};
use std::process::Command;

const TORCH_QUERY: &str = r#"
import torch, torch.utils.cpp_extension as ext
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.__version__)
print("\x1f".join(ext.include_paths()))
print("\x1f".join(ext.library_paths()))
import os, torchgen
print(os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml"))
"#;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let csrc = manifest.join("../../csrc").canonicalize().expect("csrc/ next to crates/");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    for var in ["OXIDE_PYTHON", "PYO3_PYTHON"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=src/abi");
    println!("cargo:rerun-if-changed={}", csrc.display());

    generate_header(&manifest, &out);
    generate_pointwise_ops(&manifest, &out);

    // `cargo check`/`cargo clippy` need only the Rust side: compiling the glue
    // takes minutes and its objects are used only when the module is linked.
    // Skipped under clippy (its driver is cargo's workspace wrapper) or with
    // OXIDE_SKIP_GLUE=1; a module built that way could not load, and the next
    // plain build reruns this script because both variables are watched.
    for var in ["OXIDE_SKIP_GLUE", "RUSTC_WORKSPACE_WRAPPER"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let under_clippy = std::env::var("RUSTC_WORKSPACE_WRAPPER").is_ok_and(|w| w.contains("clippy"));
    if under_clippy || std::env::var("OXIDE_SKIP_GLUE").is_ok_and(|v| v == "1") {
        return;
    }

    let python =
        std::env::var("OXIDE_PYTHON").or_else(|_| std::env::var("PYO3_PYTHON")).unwrap_or_else(|_| "python3".into());
    let output = Command::new(&python)
        .args(["-c", TORCH_QUERY])
        // A previously installed (possibly broken) torch_oxide must not be autoloaded while building the next one.
        .env("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
        .output()
        .unwrap_or_else(|e| panic!("could not run {python}: {e}"));
    assert!(
        output.status.success(),
        "{python} could not import torch (install torch==2.15.* into the build environment): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (abi, version, includes, libs, yaml) = (lines[0], lines[1], lines[2], lines[3], lines[4]);
    println!("cargo:warning=building the oxide glue against torch {version}");
    generate_device_check(Path::new(yaml), &out);

    // Every file under csrc/ (folders by layer and family, any depth) reruns the
    // build when it changes; the *.cpp among them are the glue's sources.
    let files = walk(&csrc);
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let sources: Vec<&PathBuf> = files.iter().filter(|p| p.extension().is_some_and(|x| x == "cpp")).collect();
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++20")
        .files(&sources)
        .include(&csrc)
        .include(&out)
        .define("_GLIBCXX_USE_CXX11_ABI", abi)
        .flag("-fvisibility=hidden")
        // -Wall (not -Wextra) for our files; torch's headers are system headers
        // (-isystem below), so their warnings stay theirs. OXIDE_WERROR=1 (CI) turns
        // ours into errors.
        .warnings(true)
        .extra_warnings(false)
        .opt_level(2)
        .debug(false)
        .cargo_metadata(false);
    for inc in includes.split('\x1f').filter(|s| !s.is_empty()) {
        build.flag("-isystem").flag(inc);
        // Kineto's headers (for the child profiler) ship in the wheel under include/kineto.
        let kineto = Path::new(inc).join("kineto");
        if kineto.join("IActivityProfiler.h").exists() {
            build.flag("-isystem").flag(kineto.to_str().unwrap());
        }
    }
    println!("cargo:rerun-if-env-changed=OXIDE_WERROR");
    println!("cargo:rerun-if-env-changed=OXIDE_GLUE_CACHE");
    if std::env::var("OXIDE_WERROR").is_ok_and(|v| v == "1") {
        build.flag("-Werror");
    }
    let key = glue_key(&csrc, &files, &out, &[abi, version, includes, libs], &build);
    match std::env::var_os("OXIDE_GLUE_CACHE").filter(|d| !d.is_empty()) {
        Some(dir) => compile_cached(&build, Path::new(&dir), &key, &out),
        None => build.compile("oxide_glue"),
    }

    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static:+whole-archive=oxide_glue");
    for lib in libs.split('\x1f').filter(|s| !s.is_empty()) {
        println!("cargo:rustc-link-search=native={lib}");
    }
    // No rpath: `import torch` has already loaded these sonames when our module loads.
    println!("cargo:rustc-link-lib=dylib=c10");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}

/// A digest of everything the compiled glue depends on: the glue's files (names and
/// contents), the headers generated above, torch's version, paths and ABI flag, the
/// installed libtorch_cpu (size and time, so a reinstalled torch is a new key), the
/// compiler and its flags (cc-rs adds `-m` flags for the `-C target-feature`s it
/// knows). Two builds with the same key compile the same archive.
fn glue_key(csrc: &Path, files: &[PathBuf], out: &Path, torch: &[&str], build: &cc::Build) -> String {
    use std::hash::Hasher;
    // Two differently seeded SipHashes: 128 bits, so distinct inputs never share an entry.
    let mut hashers =
        [std::collections::hash_map::DefaultHasher::new(), std::collections::hash_map::DefaultHasher::new()];
    hashers[1].write_u64(0x6f78_6964_6567_6c75);
    let mut feed = |bytes: &[u8]| {
        for h in &mut hashers {
            h.write_usize(bytes.len());
            h.write(bytes);
        }
    };
    for f in files {
        feed(f.strip_prefix(csrc).unwrap_or(f).to_string_lossy().as_bytes());
        feed(&std::fs::read(f).unwrap_or_else(|e| panic!("could not read {}: {e}", f.display())));
    }
    for generated in ["oxide_abi.h", "oxide_pointwise_ops.h", "oxide_device_check.h"] {
        feed(&std::fs::read(out.join(generated)).expect("generated above"));
    }
    for t in torch {
        feed(t.as_bytes());
    }
    for lib in torch[3].split('\x1f').map(|d| Path::new(d).join("libtorch_cpu.so")) {
        if let Ok(meta) = std::fs::metadata(&lib) {
            feed(format!("{} {:?}", meta.len(), meta.modified().ok()).as_bytes());
        }
    }
    // The arguments name this build's OUT_DIR (the generated headers' folder, whose
    // contents are fed above), which differs between target directories.
    let compiler = build.get_compiler();
    let args = format!("{:?} {:?}", compiler.path(), compiler.args());
    feed(args.replace(&*out.to_string_lossy(), "<OUT_DIR>").as_bytes());
    if let Ok(meta) = std::fs::metadata(compiler.path()) {
        feed(format!("{} {:?}", meta.len(), meta.modified().ok()).as_bytes());
    }
    format!("{:016x}{:016x}", hashers[0].finish(), hashers[1].finish())
}

/// Compiles the glue through a cache shared by several target directories (one per
/// CPU capability, `build_backend/capabilities.py`): the glue is C++ compiled with the
/// same flags for every capability, and takes minutes to compile.
fn compile_cached(build: &cc::Build, dir: &Path, key: &str, out: &Path) {
    let archive = out.join("liboxide_glue.a");
    let entry = dir.join(key);
    let cached = entry.join("liboxide_glue.a");
    if std::fs::copy(&cached, &archive).is_ok() {
        // Recently used entries survive the pruning below.
        let _ = std::fs::File::open(&entry).and_then(|f| f.set_modified(std::time::SystemTime::now()));
        println!("cargo:warning=reusing the glue compiled for these sources ({})", entry.display());
        return;
    }
    build.compile("oxide_glue");
    std::fs::create_dir_all(&entry).unwrap_or_else(|e| panic!("could not create {}: {e}", entry.display()));
    // Written under a temporary name and renamed: a concurrent build never reads half an archive.
    let partial = entry.join(format!("liboxide_glue.a.{}", std::process::id()));
    std::fs::copy(&archive, &partial).unwrap_or_else(|e| panic!("could not write {}: {e}", partial.display()));
    std::fs::rename(&partial, &cached).unwrap_or_else(|e| panic!("could not write {}: {e}", cached.display()));
    prune(dir, 4);
}

/// Removes all but the `keep` most recently used entries of the glue cache.
fn prune(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<(std::time::SystemTime, PathBuf)> =
        entries.filter_map(|e| e.ok()).filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path()))).collect();
    entries.sort();
    let stale = entries.len().saturating_sub(keep);
    for (_, path) in entries.into_iter().take(stale) {
        let _ = std::fs::remove_dir_all(path);
    }
}

/// The files under `dir`, recursively, sorted (so the archive's member order
/// does not depend on the file system's listing order).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("could not read {}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn generate_header(manifest: &Path, out: &Path) {
    let config = cbindgen::Config {
        language: cbindgen::Language::C,
        include_guard: Some("OXIDE_ABI_H".into()),
        autogen_warning: Some(
            "/* Generated by build.rs from crates/torch-oxide-ext/src/abi/ with cbindgen. Do not edit. */".into(),
        ),
        cpp_compat: true,
        usize_is_size_t: true,
        ..Default::default()
    };
    // cbindgen follows `pub mod <family>;` from mod.rs into each family's file.
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(manifest.join("src/abi/mod.rs"))
        .generate()
        .expect("cbindgen could not parse src/abi/")
        .write_to_file(out.join("oxide_abi.h"));
    // Constants of different family files share the one header: a name defined
    // twice would silently take the last value in C, so it fails the build here.
    let header = std::fs::read_to_string(out.join("oxide_abi.h")).expect("oxide_abi.h was just written");
    let mut seen = std::collections::HashSet::new();
    for name in header.lines().filter_map(|l| l.strip_prefix("#define ")).filter_map(|l| l.split_whitespace().next()) {
        assert!(seen.insert(name), "the C ABI defines {name} twice (src/abi/): give one of them another name");
    }
}

// `pointwise_op_names`: shared with oxide-kernels, whose test checks it against the compiled table.
include!("../oxide-kernels/src/ops/elementwise/table_names.rs");

/// Writes `oxide_pointwise_ops.h`: one `OXIDE_POINTWISE_<name>` constant per op
/// of oxide_kernels' pointwise table (its ABI id, the op's position in
/// `PointwiseOp::all()`) and their names, so the glue names ops at compile
/// time: a misspelt op does not compile.
fn generate_pointwise_ops(manifest: &Path, out: &Path) {
    let table = manifest.join("../oxide-kernels/src/ops/elementwise/pointwise.rs");
    println!("cargo:rerun-if-changed={}", table.display());
    let source = std::fs::read_to_string(&table).unwrap_or_else(|e| panic!("could not read {}: {e}", table.display()));
    let names = pointwise_op_names(&source);
    assert!(!names.is_empty(), "no pointwise ops found in {}", table.display());
    let mut h = String::from(
        "/* Generated by build.rs from crates/oxide-kernels/src/ops/elementwise/pointwise.rs. Do not edit. */\n\
         #pragma once\n#include <stdint.h>\n\n\
         /* Pointwise op ids of the C ABI (oxide_pointwise and friends). */\n\
         enum OxidePointwiseOp : int32_t {\n",
    );
    for (id, name) in names.iter().enumerate() {
        h.push_str(&format!("  OXIDE_POINTWISE_{name} = {id},\n"));
    }
    h.push_str(&format!("}};\n\n#define OXIDE_POINTWISE_COUNT {}\n\n", names.len()));
    h.push_str("/* Each op's name, indexed by its id. */\nstatic const char* const OXIDE_POINTWISE_NAMES[] = {\n");
    for name in &names {
        h.push_str(&format!("  \"{name}\",\n"));
    }
    h.push_str("};\n");
    std::fs::write(out.join("oxide_pointwise_ops.h"), h).expect("could not write oxide_pointwise_ops.h");
}

/// Writes `oxide_device_check.h`: the sorted names (`op` or `op.overload`) of the
/// operators that native_functions.yaml marks `device_check: NoCheck`, for
/// csrc/common/device_check.h. The yaml is read line by line: each entry starts with
/// `- func: name.overload(...)` and its keys are indented below it.
fn generate_device_check(yaml: &Path, out: &Path) {
    println!("cargo:rerun-if-changed={}", yaml.display());
    let text = std::fs::read_to_string(yaml).unwrap_or_else(|e| panic!("could not read {}: {e}", yaml.display()));
    let mut names = Vec::new();
    let mut current: Option<&str> = None;
    for line in text.lines() {
        if let Some(func) = line.strip_prefix("- func:") {
            current = func.trim().split('(').next();
        } else if let Some(rest) = line.trim_start().strip_prefix("device_check:") {
            if line.starts_with(' ') && rest.trim_start().starts_with("NoCheck") {
                names.extend(current);
            }
        }
    }
    assert!(names.len() > 100, "found only {} NoCheck operators in {}", names.len(), yaml.display());
    names.sort_unstable();
    names.dedup();
    let mut header = String::from(
        "/* Generated by build.rs from PyTorch's native_functions.yaml. Do not edit. */\n#pragma once\n#include <string_view>\n\n\
         namespace oxide::device_check {\n// Operators marked `device_check: NoCheck`, sorted.\ninline constexpr std::string_view k_no_device_check[] = {\n",
    );
    for n in &names {
        header.push_str(&format!("    \"{n}\",\n"));
    }
    header.push_str("};\n} // namespace oxide::device_check\n");
    std::fs::write(out.join("oxide_device_check.h"), header).expect("write oxide_device_check.h");
}
