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
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    let entries = tar
        .entries()
        .map_err(|e| fail(format!("is not a gzipped tar archive: {e}")))?;
    for (count, entry) in entries.enumerate() {
        if count >= MAX_ENTRIES {
            return Err(fail(format!("holds more than {MAX_ENTRIES} entries")));
        }
        let mut entry = entry.map_err(|e| fail(format!("is not a gzipped tar archive: {e}")))?;
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
        if size > budget.left {
            return Err(fail(format!(
                "decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes with the chart's other archives"
            )));
        }
        let mut data = Vec::with_capacity(size as usize);
        (&mut entry)
            .take(size)
            .read_to_end(&mut data)
            .map_err(|e| fail(format!("{path}: {e}")))?;
        budget.left -= data.len() as u64;
        files.insert(inside.to_string(), data);
    }
    if !files.contains_key("Chart.yaml") {
        return Err(fail("holds no Chart.yaml below its top directory".into()));
    }
    Ok(files)
}
