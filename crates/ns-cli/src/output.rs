//! Writing results: to stdout, or to a file replaced atomically (a temporary file beside it,
//! renamed into place), so a full disk never leaves a partial `-o` file. A closed pipe
//! (`nextstat … | head -1`) ends the program quietly, as Unix tools do.

use ns_core::{Error, Result};
use std::io::Write;
use std::path::Path;

/// Write `text` to stdout as it is.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(Error::io("standard output", e)),
    }
}

/// Write `text` to `path` (or stdout when `None`), ending with exactly one newline.
pub fn emit(text: &str, path: Option<&Path>) -> Result<()> {
    let text = format!("{}\n", text.trim_end_matches('\n'));
    match path {
        None => print(&text),
        Some(path) => write_file(path, &text),
    }
}

/// Write what a `pyhf` command writes: on stdout with a newline (`click.echo`), to a file exactly
/// as `json.dump` leaves it (no trailing newline), so files compare byte for byte with pyhf's.
pub fn emit_as_pyhf(text: &str, path: Option<&Path>) -> Result<()> {
    match path {
        None => print(&format!("{text}\n")),
        Some(path) => write_file(path, text),
    }
}

/// Replace `path` with `text`: written to a temporary file in the same folder and renamed, so
/// `path` is either untouched or complete. `-` is stdout. A symbolic link is followed (its
/// target is replaced, the link stays); a folder, or a file this command read, is refused.
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    write_file_of("-o", path, text)
}

/// [`write_file`] for the option `flag` (named in its refusals).
pub fn write_file_of(flag: &str, path: &Path, text: &str) -> Result<()> {
    write_bytes_of(flag, path, text.as_bytes())
}

/// [`write_file_of`] for any bytes (an image).
pub fn write_bytes_of(flag: &str, path: &Path, bytes: &[u8]) -> Result<()> {
    if path.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        return match out.write_all(bytes).and_then(|()| out.flush()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
            Err(e) => Err(Error::io("standard output", e)),
        };
    }
    if path.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{flag} {}: that is a folder; give a file name",
            path.display()
        )));
    }
    if let Some(input) = crate::input::input_at(path) {
        return Err(Error::InvalidInput(format!(
            "{flag} {}: that is {}, an input of this command; writing there would replace it \
             (choose another file)",
            path.display(),
            input.display()
        )));
    }
    // Replace what a link points at, not the link (a dangling link: the file it names).
    let path = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => match std::fs::canonicalize(path) {
            Ok(target) => target,
            Err(_) => {
                let target = std::fs::read_link(path).map_err(|e| Error::io(path.display(), e))?;
                path.parent().unwrap_or(Path::new(".")).join(target)
            }
        },
        _ => path.to_path_buf(),
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = dir.join(format!(".{name}.nextstat-{}.tmp", std::process::id()));
    let written = std::fs::File::create(&temporary).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&temporary, &path)) {
        let _ = std::fs::remove_file(&temporary);
        return Err(Error::io(path.display(), e));
    }
    Ok(())
}
