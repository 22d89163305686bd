//! Chart archives (`.tgz`), read in memory as Helm reads them: every path below the archive's
//! one top directory, regular files only, nothing absolute or climbing out; within a budget
//! of decompressed bytes that a whole chart's archives (nested ones too) draw on, so a small
//! archive cannot inflate into gigabytes.

use std::collections::BTreeMap;
use std::io::Read;

use crate::HelmError;

/// What the archives of one chart may decompress to, together: 64 MiB. Fixed.
pub const MAX_DECOMPRESSED_BYTES: u64 = 64 * 1024 * 1024;
/// One file of an archive, decompressed: 5 MiB, as Helm's `MaxDecompressedFileSize`. Fixed.
pub const MAX_FILE_BYTES: u64 = 5 * 1024 * 1024;
/// Entries of one archive: 10,000. Fixed.
pub const MAX_ENTRIES: usize = 10_000;

/// The decompressed bytes left to a chart's archives.
#[derive(Debug)]
pub struct Budget {
    pub left: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            left: MAX_DECOMPRESSED_BYTES,
        }
    }
}

/// The files of a chart archive, keyed by path inside the chart (the archive's top directory,
/// the chart's name, left out).
pub fn unpack(
    name: &str,
    archive: &[u8],
    budget: &mut Budget,
) -> Result<BTreeMap<String, Vec<u8>>, HelmError> {
    let fail = |message: String| HelmError::Chart {
        file: name.to_string(),
        message,
    };
    let mut files = BTreeMap::new();
    // Every byte the tar reader takes counts, headers included: a long-name or pax header
    // is read whole into memory before any entry is seen.
    let limited = Limited {
        inner: flate2::read::GzDecoder::new(archive),
        left: budget.left,
    };
    let mut tar = tar::Archive::new(limited);
    let over = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::FileTooLarge {
            fail(format!(
                "decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes with the chart's other archives"
            ))
        } else {
            fail(format!("is not a gzipped tar archive: {e}"))
        }
    };
    let entries = tar.entries().map_err(over)?;
    for (count, entry) in entries.enumerate() {
        if count >= MAX_ENTRIES {
            return Err(fail(format!("holds more than {MAX_ENTRIES} entries")));
        }
        let mut entry = entry.map_err(over)?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry
            .path()
            .map_err(|e| fail(format!("an entry's path: {e}")))?
            .to_string_lossy()
            .replace('\\', "/");
        if path.starts_with('/') || path.split('/').any(|part| part == "..") {
            return Err(fail(format!("{path}: a path outside the chart")));
        }
        // Every file is below the chart's own directory, which Helm drops.
        let Some((_, inside)) = path.trim_start_matches("./").split_once('/') else {
            continue;
        };
        let size = entry.header().size().unwrap_or(u64::MAX);
        if size > MAX_FILE_BYTES {
            return Err(fail(format!("{path}: more than {MAX_FILE_BYTES} bytes")));
        }
        let mut data = Vec::with_capacity(size as usize);
        (&mut entry)
            .take(size)
            .read_to_end(&mut data)
            .map_err(over)?;
        files.insert(inside.to_string(), data);
    }
    budget.left = tar.into_inner().left;
    if !files.contains_key("Chart.yaml") {
        return Err(fail("holds no Chart.yaml below its top directory".into()));
    }
    Ok(files)
}

/// A reader that fails once more than `left` bytes were asked of it.
struct Limited<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            // More data is an error, the end of the archive is not.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(std::io::ErrorKind::FileTooLarge.into()),
            };
        }
        let wanted = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let read = self.inner.read(&mut buf[..wanted])?;
        self.left -= read as u64;
        Ok(read)
    }
}
