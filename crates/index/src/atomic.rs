//! Atomic file writes: write a temporary file beside the target, sync it, rename
//! it over the target, sync the directory. A crash at any point leaves either the
//! old file or the new one, never a torn one.
//!
//! The temporary file is `.<name>.octex.tmp<PID>`. A failed write removes it;
//! a process killed mid-write cannot, so every save first removes the
//! temporary files of the same target whose process is gone (on Linux by
//! `/proc/<PID>`, elsewhere when older than a day): a killed save leaves its
//! temporary file only until the next save of that path.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Write a file atomically; `write` fills a buffered writer.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => Path::new(".").to_path_buf(),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let prefix = format!(".{}.octex.tmp", name.to_string_lossy());
    remove_stale_temps(&dir, &prefix);
    let tmp = dir.join(format!("{prefix}{}", std::process::id()));
    let result = (|| {
        let file = File::create(&tmp)?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        write(&mut w)?;
        w.flush()?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Remove `dir/<prefix><PID>` files whose process no longer runs.
fn remove_stale_temps(dir: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !process_alive(pid, &entry) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(target_os = "linux")]
fn process_alive(pid: u32, _: &fs::DirEntry) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(not(target_os = "linux"))]
fn process_alive(_: u32, entry: &fs::DirEntry) -> bool {
    let day = std::time::Duration::from_secs(24 * 3600);
    entry
        .metadata()
        .and_then(|m| m.modified())
        .map(|t| t.elapsed().map_or(true, |age| age < day))
        .unwrap_or(true)
}

/// Whether a file can be written at `path`: its folder exists and takes a new
/// file (tried with a probe that is removed at once). For commands that would
/// otherwise find out only after a long build.
pub fn check_writable(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{}: no such folder", dir.display()),
        ));
    }
    if path.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is a folder, not a file name", path.display()),
        ));
    }
    let probe = dir.join(format!(".octex-write-probe{}", std::process::id()));
    File::create(&probe).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{}: cannot write here: {e}", dir.display()),
        )
    })?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary file left by a killed save (its PID gone) is removed by
    /// the next save of the same path; a failed write leaves none.
    #[test]
    fn stale_temps_go_at_the_next_save() {
        let dir = std::env::temp_dir().join(format!("octex-atomic-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let target = dir.join("x.octex");
        // PID 4194304 is above Linux's pid_max (2^22): never a live process.
        let stale = dir.join(".x.octex.octex.tmp4194304");
        let other = dir.join(".y.octex.octex.tmp4194304");
        fs::write(&stale, b"partial").unwrap();
        fs::write(&other, b"another target's").unwrap();
        write_atomically(&target, |w| w.write_all(b"new")).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        assert!(
            !stale.exists(),
            "the stale temp file of this target is gone"
        );
        assert!(other.exists(), "another target's temp file is left alone");
        let failed = write_atomically(&target, |_| Err(io::Error::other("disk full")));
        assert!(failed.is_err());
        assert_eq!(fs::read(&target).unwrap(), b"new", "the old file survives");
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".x.octex"))
            .collect();
        assert!(left.is_empty(), "no temp file after a failed write");
        assert!(check_writable(&target).is_ok());
        assert!(check_writable(&dir.join("missing/y.octex")).is_err());
        assert!(check_writable(&dir).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
