//! What one request may cost before the server pays for it, as kube-apiserver and etcd bound
//! theirs: the body's size, how deep its decoded value nests, how many operations a JSON
//! patch holds and how much it may copy, and the size of an object once stored. Every limit
//! here is refused with a `Status` that names it, before the work it guards is done.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use crate::status::{ApiError, ApiResult};

/// Requests refused by a limit of this module, for `lariat_limit_refusals_total`.
static REFUSED: [AtomicU64; LIMIT_NAMES.len()] = [const { AtomicU64::new(0) }; LIMIT_NAMES.len()];
const LIMIT_NAMES: [&str; 9] = [
    "depth",
    "patch_operations",
    "patch_copy_bytes",
    "object_bytes",
    "yaml_aliases",
    "bodies_in_flight",
    "responses_in_flight",
    "stalled_readers",
    "responses_per_user",
];

/// Which limit refused a request.
#[derive(Clone, Copy)]
pub(crate) enum Limit {
    Depth = 0,
    PatchOperations = 1,
    PatchCopyBytes = 2,
    ObjectBytes = 3,
    YamlAliases = 4,
    BodiesInFlight = 5,
    /// What responses being written may hold together (`sending.rs`).
    ResponsesInFlight = 6,
    /// Responses cut because their client stopped reading (`sending.rs`).
    StalledReaders = 7,
    /// What one user's responses being written may hold (`sending.rs`).
    ResponsesPerUser = 8,
}

pub(crate) fn refused(limit: Limit) {
    REFUSED[limit as usize].fetch_add(1, Ordering::Relaxed);
}

/// The limits' metrics in Prometheus' text format: refusals by limit, and what the watch
/// cache holds (`watch_cache_bytes`, from `Resources::watch_cache_bytes`).
pub fn metrics(watch_cache_bytes: usize) -> String {
    let mut text = String::from(
        "# HELP lariat_limit_refusals_total Requests refused because they exceeded a limit, by limit.\n# TYPE lariat_limit_refusals_total counter\n",
    );
    for (name, count) in LIMIT_NAMES.iter().zip(&REFUSED) {
        text.push_str(&format!(
            "lariat_limit_refusals_total{{limit=\"{name}\"}} {}\n",
            count.load(Ordering::Relaxed)
        ));
    }
    text.push_str(&format!(
        "# HELP lariat_watch_cache_bytes What the objects the watch cache keeps weigh (--watch-cache-bytes bounds it).\n# TYPE lariat_watch_cache_bytes gauge\nlariat_watch_cache_bytes {watch_cache_bytes}\n"
    ));
    text
}

/// The largest request body read (kube-apiserver's 3 MiB). Fixed, as in kube-apiserver.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// How deep a decoded body may nest (objects and arrays, JSON and YAML alike): what
/// serde_json's own recursion limit allows (it refuses the 128th level), so a body no parser
/// here can hold is refused the same way whatever its format. kube-apiserver's decoder allows 10,000, but no Kubernetes object comes near 128 and
/// every pass over an object (schema, pruning, managed fields) recurses. Fixed.
pub const MAX_DEPTH: usize = 127;

/// The most operations one JSON patch may hold (kube-apiserver's `maxJSONPatchOperations`).
/// Fixed.
pub const MAX_PATCH_OPERATIONS: usize = 10_000;

/// The default of `--watch-cache-bytes`: what the objects the watch cache keeps for all
/// watchers may weigh.
pub const DEFAULT_WATCH_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// The largest object stored, once encoded (etcd's default request limit is 1.5 MiB, and
/// kube-apiserver's objects must fit in it): `--max-object-bytes`.
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 3 * 512 * 1024;

/// What the bodies of all requests being received may hold together: 256 MiB. A client that
/// sends most of a 3 MiB body and withholds the rest holds that memory until the body
/// deadline; without this, a few hundred such requests hold gigabytes (the second probe saw
/// 2.2 GB from one address). Beyond it a request is answered 429 and retried. Fixed.
pub const MAX_BODY_BYTES_IN_FLIGHT: usize = 256 * 1024 * 1024;

static BODY_BYTES: std::sync::LazyLock<std::sync::Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| {
        std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_BODY_BYTES_IN_FLIGHT))
    });

/// Takes `bytes` of the bytes bodies being received may hold together, until the returned
/// permit is dropped; a 429 when they are all taken.
pub fn receive_body_bytes(bytes: usize) -> ApiResult<tokio::sync::OwnedSemaphorePermit> {
    let count = u32::try_from(bytes).unwrap_or(u32::MAX);
    BODY_BYTES.clone().try_acquire_many_owned(count).map_err(|_| {
        refused(Limit::BodiesInFlight);
        ApiError::TooManyRequests {
            message: format!(
                "the server is receiving {MAX_BODY_BYTES_IN_FLIGHT} bytes of request bodies at once, its limit; retry shortly"
            ),
            retry_after_seconds: 1,
        }
    })
}

/// Bodies larger than this are decoded on a thread the runtime may block, so that parsing
/// them never holds up the requests the runtime's workers answer meanwhile (`/healthz`,
/// other users').
const OFFLOAD_BYTES: usize = 64 * 1024;

/// The limits an operator may set (`lariat server --max-object-bytes --watch-cache-bytes`).
#[derive(Clone, Copy, Debug)]
pub struct ResourceLimits {
    /// The largest object stored, encoded as JSON (Secrets before encryption).
    pub max_object_bytes: usize,
    /// What the watch cache's objects may weigh (`fanout::Fanout`).
    pub watch_cache_bytes: usize,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
            watch_cache_bytes: DEFAULT_WATCH_CACHE_BYTES,
        }
    }
}

impl ResourceLimits {
    /// Refuses an encoded object larger than the limit, before it is written.
    pub fn check_stored(&self, bytes: usize) -> ApiResult<()> {
        if bytes <= self.max_object_bytes {
            return Ok(());
        }
        refused(Limit::ObjectBytes);
        Err(ApiError::TooLarge {
            message: format!(
                "the object would be {bytes} bytes once stored, more than the {}-byte limit of one object (--max-object-bytes)",
                self.max_object_bytes
            ),
        })
    }
}

/// Runs CPU-bound work on a body of `size` bytes: in place when small, and for large bodies
/// where the runtime lets a worker block (`block_in_place` hands its other tasks to another
/// thread), so the answer to `/healthz` never waits behind a parse.
pub fn offload<R>(size: usize, work: impl FnOnce() -> R) -> R {
    let blockable = size > OFFLOAD_BYTES
        && tokio::runtime::Handle::try_current().is_ok_and(|runtime| {
            runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        });
    if blockable {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

fn too_deep(format: &str) -> ApiError {
    refused(Limit::Depth);
    ApiError::bad_request(format!(
        "the {format} body nests deeper than the limit of {MAX_DEPTH} levels of objects and arrays"
    ))
}

/// Decodes a JSON body, refusing one that nests deeper than [`MAX_DEPTH`] with a message that
/// names the limit. `what` names the body in other errors ("the request body").
///
/// The JSON parser refuses the 128th level itself as it reads it, in one pass, so no pass of
/// ours comes first: its refusal is only told apart, to name the limit.
pub fn json(bytes: &[u8], what: &str) -> ApiResult<Value> {
    offload(bytes.len(), || serde_json::from_slice(bytes))
        .map_err(|e| undecodable("JSON", what, &e))
}

/// A body the parser refused: for nesting past the parser's recursion limit (which
/// [`MAX_DEPTH`] states), a refusal that names the limit.
fn undecodable(format: &str, what: &str, error: &dyn std::fmt::Display) -> ApiError {
    let error = error.to_string();
    if error.contains("recursion limit exceeded") {
        too_deep(format)
    } else {
        ApiError::bad_request(format!("{what} is not valid {format}: {error}"))
    }
}

/// Decodes a YAML body (one document), refusing one that nests deeper than [`MAX_DEPTH`].
/// The parser reads a whole document before anything is deserialized, and its cost grows
/// with the square of the flow nesting (`[[[...`): a bound read in one linear pass comes
/// first, and the deserializer's own recursion limit catches deep block nesting.
pub fn yaml(bytes: &[u8], what: &str) -> ApiResult<Value> {
    let shape = yaml_shape(bytes);
    if shape.depth > MAX_DEPTH {
        return Err(too_deep("YAML"));
    }
    // Each alias repeats its anchor's node in full, so a 3 MiB body of aliases to a 1 MB
    // string decodes to gigabytes (the probe saw 3 GB from one request); the parser's guard
    // counts repetitions, not bytes. kubectl and client libraries send objects expanded.
    if shape.aliases > 0 {
        refused(Limit::YamlAliases);
        return Err(ApiError::bad_request(format!(
            "{what} uses YAML aliases (*name): they are not accepted in request bodies, as one alias can repeat any amount of the body; send the object with its aliases expanded (kubectl does)"
        )));
    }
    offload(bytes.len(), || serde_yaml_ng::from_slice::<Value>(bytes))
        .map_err(|e| undecodable("YAML", what, &e))
}

/// What the cheap pass over a YAML text finds before any parser runs.
#[derive(Debug, PartialEq, Eq)]
struct YamlShape {
    /// An upper bound of how deep collections nest.
    depth: usize,
    /// How many aliases (`*name`) it uses.
    aliases: usize,
}

/// Reads a YAML text in one pass for an upper bound of its nesting and its aliases. Flow
/// collections (`[`, `{`) count where a node starts (at the start of a line's content, after
/// `- `, `: `, `? `, `---`, or inside a flow collection after `[`, `{` or `,`), so brackets
/// inside plain scalars (`echo [x`), quoted scalars, comments and block scalars (`|`, `>`)
/// do not. Block collections count by indentation (each deeper level of a line's content
/// is one more) and by compact indicators (`- - - x`, `? ? x`: one each).
fn yaml_shape(text: &[u8]) -> YamlShape {
    let (mut depth, mut deepest, mut aliases) = (0usize, 0usize, 0usize);
    let mut i = 0;
    // The indentation of the line that opened a block scalar, while its content lasts.
    let mut block_scalar: Option<usize> = None;
    // The indentations of the block levels open at the current line.
    let mut indents: Vec<usize> = Vec::new();
    let mut block_depth = 0;
    let mut line_indicators = 0;
    let mut line_indent = 0;
    let mut node_start = true;
    let mut after_space = true;
    let mut line_start = true;
    while i < text.len() {
        if line_start {
            line_start = false;
            let indent = text[i..].iter().take_while(|&&b| b == b' ').count();
            let rest = &text[i + indent..];
            let blank = rest
                .iter()
                .take_while(|&&b| b != b'\n')
                .all(|&b| b == b' ' || b == b'\t' || b == b'\r');
            if let Some(parent) = block_scalar {
                if blank || indent > parent {
                    i = skip_line(text, i);
                    line_start = true;
                    continue;
                }
                block_scalar = None;
            }
            if blank || rest.starts_with(b"#") {
                i = skip_line(text, i);
                line_start = true;
                continue;
            }
            line_indent = indent;
            line_indicators = 0;
            i += indent;
            after_space = true;
            if depth == 0 {
                node_start = true;
                while indents.last().is_some_and(|&open| open >= indent) {
                    indents.pop();
                }
                indents.push(indent);
                block_depth = indents.len();
                deepest = deepest.max(block_depth);
            }
            if rest.starts_with(b"---") && rest.get(3).is_none_or(|b| b.is_ascii_whitespace()) {
                i += 3;
                node_start = true;
                indents.clear();
            }
            continue;
        }
        let b = text[i];
        let next_is_space = text.get(i + 1).is_none_or(|b| b.is_ascii_whitespace());
        match b {
            b'\n' => {
                line_start = true;
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                after_space = true;
                i += 1;
                continue;
            }
            b'#' if after_space => {
                i = skip_line(text, i);
                line_start = true;
                continue;
            }
            b'"' | b'\'' if node_start => {
                i = skip_quoted(text, i);
                node_start = false;
            }
            b'[' | b'{' if node_start || depth > 0 => {
                depth += 1;
                deepest = deepest.max(block_depth + depth);
                node_start = true;
                i += 1;
            }
            b']' | b'}' if depth > 0 => {
                depth -= 1;
                node_start = false;
                i += 1;
            }
            b',' if depth > 0 => {
                node_start = true;
                i += 1;
            }
            b'-' | b'?' if next_is_space && node_start => {
                // The line's first indicator is the collection its indentation opened; each
                // further one is a compact collection inside it.
                if depth == 0 {
                    line_indicators += 1;
                    if line_indicators > 1 {
                        block_depth += 1;
                        deepest = deepest.max(block_depth);
                    }
                }
                i += 1;
            }
            b':' if next_is_space => {
                node_start = true;
                i += 1;
            }
            b'|' | b'>' if node_start && depth == 0 => {
                block_scalar = Some(line_indent);
                i = skip_line(text, i);
                line_start = true;
                continue;
            }
            b'*' if node_start => {
                aliases += 1;
                node_start = false;
                i += 1;
            }
            // Anchors and tags come before the node they name.
            b'&' | b'!' if node_start => {
                while i < text.len() && !text[i].is_ascii_whitespace() {
                    i += 1;
                }
            }
            _ => {
                node_start = false;
                i += 1;
            }
        }
        after_space = false;
    }
    YamlShape {
        depth: deepest,
        aliases,
    }
}

fn skip_line(text: &[u8], from: usize) -> usize {
    text[from..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(text.len(), |at| from + at + 1)
}

/// The index after the quoted scalar starting at `from` (`"..."` with backslash escapes,
/// `'...'` with `''`), or the end of the text when it is not closed.
fn skip_quoted(text: &[u8], from: usize) -> usize {
    let quote = text[from];
    let mut i = from + 1;
    while i < text.len() {
        match text[i] {
            b'\\' if quote == b'"' => i += 2,
            b'\'' if quote == b'\'' && text.get(i + 1) == Some(&b'\'') => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    text.len()
}

/// Refuses a JSON patch of more than [`MAX_PATCH_OPERATIONS`] operations.
pub fn check_patch_operations(count: usize) -> ApiResult<()> {
    if count <= MAX_PATCH_OPERATIONS {
        return Ok(());
    }
    refused(Limit::PatchOperations);
    Err(ApiError::TooLarge {
        message: format!(
            "the JSON patch has {count} operations, more than the limit of {MAX_PATCH_OPERATIONS}"
        ),
    })
}

/// The refusal of a JSON patch whose copies would exceed `max_bytes`.
pub fn patch_copies_too_much(max_bytes: usize) -> ApiError {
    refused(Limit::PatchCopyBytes);
    ApiError::TooLarge {
        message: format!(
            "the JSON patch copies more than the {max_bytes}-byte limit of one object (--max-object-bytes)"
        ),
    }
}

/// How many bytes `value` takes as JSON, counted up to `budget` and no further, so measuring
/// what a patch would copy costs no more than the copy it refuses.
pub fn encoded_size_within(value: &Value, budget: usize) -> Option<usize> {
    struct Counter {
        count: usize,
        budget: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.count += buf.len();
            if self.count > self.budget {
                return Err(std::io::Error::other("over budget"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { count: 0, budget };
    serde_json::to_writer(&mut counter, value)
        .ok()
        .map(|()| counter.count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_yaml(text: &str, depth: usize) {
        assert_eq!(yaml_shape(text.as_bytes()).depth, depth, "{text:?}");
    }

    #[test]
    fn yaml_depth_counts_collections_not_scalars() {
        check_yaml("a: [1, [2, {b: [3]}]]\n", 5);
        check_yaml("- [[x]]\n- {}\n", 3);
        check_yaml("--- [[1]]\n", 3);
        check_yaml("key: !!seq [[1]]\n", 3);
        check_yaml("a:\n  b:\n    c: 1\n  d: 2\ne: 3\n", 3);
        check_yaml("- - - x\n", 3);
        check_yaml("? ? ? a\n", 3);
        // Brackets inside plain scalars, quoted scalars, comments and block scalars.
        check_yaml("cmd: echo [[[[ x\n", 1);
        check_yaml("cmd: \"[[[[\"\nother: '[[[['\n", 1);
        check_yaml("a: 1 # [[[[\n", 1);
        check_yaml("script: |\n  [[[[\n  {{{{\n\n  [[\nnext: [1]\n", 2);
        check_yaml("- >-\n    [[[[\n- [[2]]\n", 3);
        // A flow collection spanning lines, with a quoted bracket inside.
        check_yaml("a: [\n  \"]\",\n  [1]\n]\n", 3);
    }

    /// Regressions (the second probe): `? ` nesting went past the depth check, `- ` nesting
    /// was refused only after the parser had spent memory on it, and aliases of a large
    /// string decoded to gigabytes.
    #[test]
    fn compact_nesting_and_aliases_are_refused_before_parsing() {
        for indicator in ["? ", "- "] {
            let body = format!("{}a\n", indicator.repeat(1_500_000));
            let error = yaml(body.as_bytes(), "the body").unwrap_err();
            assert!(error.to_string().contains("levels"), "{error}");
        }
        let aliased = format!("a: &a \"{}\"\nb: [*a, *a]\n", "x".repeat(1000));
        let error = yaml(aliased.as_bytes(), "the body").unwrap_err();
        assert!(error.to_string().contains("aliases"), "{error}");
        assert_eq!(yaml_shape(b"a: '*not'\nb: x*y\n").aliases, 0);
    }

    #[test]
    fn deep_bodies_are_refused_with_the_limit() {
        let deep_yaml = format!("spec: {}{}", "[".repeat(200_000), "]".repeat(200_000));
        let started = std::time::Instant::now();
        let error = yaml(deep_yaml.as_bytes(), "the body").unwrap_err();
        assert!(error.to_string().contains("127 levels"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let deep_block = (0..200)
            .map(|level| format!("{}- \n", "  ".repeat(level)))
            .collect::<String>();
        let error = yaml(deep_block.as_bytes(), "the body").unwrap_err();
        assert!(error.to_string().contains("127 levels"), "{error}");
        let deep_json = format!("{}{}", "[".repeat(128), "]".repeat(128));
        let error = json(deep_json.as_bytes(), "the body").unwrap_err();
        assert!(error.to_string().contains("127 levels"), "{error}");
        let shallow = format!("{}{}", "[".repeat(100), "]".repeat(100));
        json(shallow.as_bytes(), "the body").unwrap();
        yaml(shallow.as_bytes(), "the body").unwrap();
    }

    #[test]
    fn sizes_are_counted_within_a_budget() {
        let value = serde_json::json!({"a": "bcd"});
        assert_eq!(encoded_size_within(&value, 100), Some(11));
        assert_eq!(encoded_size_within(&value, 5), None);
    }
}
