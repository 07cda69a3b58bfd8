//! Passages of English prose from Debian's documentation packages, for the text
//! data set (`fetch debian-docs-minilm`).
//!
//! Each source file is cut into paragraphs by a reader for its format
//! (reStructuredText and plain text, POD, man pages, HTML), paragraphs into
//! sentences, and runs of one to three consecutive sentences of one paragraph
//! become a passage. Sentences that look like code, tables or markup are
//! dropped. Everything is deterministic: files are read in path order, and the
//! choices (passage lengths, the query split) come from a hash of the text.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use xxhash_rust::xxh3::xxh3_64;

/// The longest passage kept, in bytes; longer runs are cut at a sentence.
const MAX_PASSAGE_BYTES: usize = 600;
/// The shortest passage kept, in bytes.
const MIN_PASSAGE_BYTES: usize = 40;

/// The files under `root` (an unpacked tree of .deb packages) that hold prose,
/// in path order.
pub fn source_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .filter(|p| format_of(p).is_some())
        .collect();
    files.sort();
    files
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    PlainText,
    Pod,
    Man,
    Html,
}

fn format_of(path: &Path) -> Option<Format> {
    let name = path.file_name()?.to_str()?;
    let name = name.strip_suffix(".gz").unwrap_or(name);
    let s = path.to_string_lossy();
    let translated = (s.contains("/debian-handbook/html/") && !s.contains("/html/en-US/"))
        || (s.contains("/gnucash-docs/") && !s.contains("-en/"))
        || (s.contains("/share/help/") && !s.contains("/share/help/C/"))
        || s.contains("/translations/");
    if translated {
        return None;
    }
    if (name.ends_with(".txt")
        && (s.contains("/_sources/") || s.contains("/Documentation/") || s.contains("/git-doc/")))
        || name.ends_with(".md")
    {
        Some(Format::PlainText)
    } else if name.ends_with(".pod") {
        Some(Format::Pod)
    } else if s.contains("/share/man/man") && !s.contains("/share/man/man3/") {
        Some(Format::Man)
    } else if (name.ends_with(".html") && !beside_sphinx_sources(path)) || name.ends_with(".page") {
        Some(Format::Html)
    } else {
        None
    }
}

/// Sphinx manuals ship their sources (`_sources/`) beside the HTML: those are
/// read instead.
fn beside_sphinx_sources(path: &Path) -> bool {
    path.ancestors()
        .skip(1)
        .take(5)
        .any(|dir| dir.join("_sources").is_dir())
}

/// Read one file (gzip-compressed when its name ends in `.gz`) as text.
fn read_text(path: &Path) -> Result<String> {
    let mut bytes = Vec::new();
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    if path.extension().is_some_and(|e| e == "gz") {
        flate2::read::GzDecoder::new(file)
            .read_to_end(&mut bytes)
            .with_context(|| format!("{}: not gzip", path.display()))?;
    } else {
        std::io::BufReader::new(file).read_to_end(&mut bytes)?;
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Every passage of the files, in order, without duplicates.
pub fn passages(files: &[PathBuf], mut on_file: impl FnMut(usize)) -> Result<Vec<String>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, path) in files.iter().enumerate() {
        let text = read_text(path)?;
        let format = format_of(path).expect("source_files keeps known formats");
        for paragraph in paragraphs(&text, format) {
            for passage in passages_of(&sentences(&paragraph)) {
                if seen.insert(xxh3_64(passage.as_bytes())) {
                    out.push(passage);
                }
            }
        }
        on_file(i + 1);
    }
    Ok(out)
}

/// Split a format's text into paragraphs of running prose (markup removed).
fn paragraphs(text: &str, format: Format) -> Vec<String> {
    match format {
        Format::PlainText | Format::Pod => blank_line_paragraphs(text, format),
        Format::Man => man_paragraphs(text),
        Format::Html => html_paragraphs(text),
    }
}

fn blank_line_paragraphs(text: &str, format: Format) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_code = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            flush(&mut current, &mut out);
            continue;
        }
        let indented = line.starts_with("    ") || line.starts_with('\t');
        // A paragraph that ends in `::` (rst) or an indented block in POD is
        // followed by literal code.
        if in_code && indented {
            continue;
        }
        in_code = false;
        let markup = trimmed.starts_with("..")
            || (format == Format::Pod && trimmed.starts_with('='))
            || is_underline(trimmed)
            || (format == Format::Pod && indented);
        if markup {
            flush(&mut current, &mut out);
            continue;
        }
        let line = strip_bullet(trimmed);
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(line);
        if trimmed.ends_with("::") {
            in_code = true;
            flush(&mut current, &mut out);
        }
    }
    flush(&mut current, &mut out);
    out.iter().map(|p| strip_inline_markup(p, format)).collect()
}

fn flush(current: &mut String, out: &mut Vec<String>) {
    if !current.is_empty() {
        out.push(std::mem::take(current));
    }
}

/// A heading underline or table rule: one punctuation character repeated.
fn is_underline(line: &str) -> bool {
    let mut chars = line.chars();
    match chars.next() {
        Some(c) if c.is_ascii_punctuation() => {
            line.len() >= 3 && line.chars().all(|d| d == c || d == ' ' || d == '+')
        }
        _ => false,
    }
}

fn strip_bullet(line: &str) -> &str {
    for prefix in ["* ", "- ", "+ ", "#. "] {
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.trim_start();
        }
    }
    line
}

/// Remove inline markup: rst roles and backquotes, emphasis stars, POD's
/// `X<...>` codes.
fn strip_inline_markup(text: &str, format: Format) -> String {
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if format == Format::Pod && c.is_ascii_uppercase() && chars.get(i + 1) == Some(&'<') {
            i += 2;
            continue;
        }
        if format == Format::Pod && c == '>' {
            i += 1;
            continue;
        }
        // rst roles such as :ref:`text` and :c:func:`name`
        if c == ':' {
            let mut j = i + 1;
            while j < chars.len()
                && (chars[j].is_ascii_alphanumeric() || chars[j] == ':' || chars[j] == '-')
            {
                j += 1;
            }
            if j < chars.len() && chars[j] == '`' && j > i + 1 && chars[j - 1] == ':' {
                i = j;
                continue;
            }
        }
        if c == '`' || c == '*' || c == '|' {
            i += 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    // rst link targets: `text <url>`_ leaves "text <url>_"
    out.replace(">_", ">").replace("__", "")
}

fn man_paragraphs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut literal = false;
    for line in text.lines() {
        if let Some(request) = line.strip_prefix('.').or_else(|| line.strip_prefix('\'')) {
            let mut parts = request.trim_start().splitn(2, char::is_whitespace);
            let name = parts.next().unwrap_or("");
            let args = parts.next().unwrap_or("").trim();
            match name {
                "nf" | "EX" => {
                    literal = true;
                    flush(&mut current, &mut out);
                }
                "fi" | "EE" => literal = false,
                "B" | "I" | "BR" | "IR" | "RB" | "RI" | "BI" | "IB" | "SM" | "SB" if !literal => {
                    let joined = if name.len() == 2 {
                        args.replace('"', "")
                            .split_whitespace()
                            .collect::<Vec<_>>()
                            .join("")
                    } else {
                        args.replace('"', "")
                    };
                    if !current.is_empty() {
                        current.push(' ');
                    }
                    current.push_str(&joined);
                }
                _ => flush(&mut current, &mut out),
            }
            continue;
        }
        if literal {
            continue;
        }
        if line.trim().is_empty() {
            flush(&mut current, &mut out);
            continue;
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(line.trim());
    }
    flush(&mut current, &mut out);
    out.iter().map(|p| groff_escapes(p)).collect()
}

/// Replace or drop groff escapes (`\fB`, `\-`, `\(aq`, `\*(..`).
fn groff_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            // Font changes and named strings: `\fB`, `\f(CW`, `\*R`, `\*(Tm`.
            Some('f') | Some('*') => skip_escape_name(&mut chars),
            Some('(') => {
                let a = chars.next().unwrap_or(' ');
                let b = chars.next().unwrap_or(' ');
                match (a, b) {
                    ('a', 'q') | ('r', 'q') | ('l', 'q') | ('d', 'q') => out.push('\''),
                    ('e', 'm') | ('e', 'n') => out.push('-'),
                    _ => {}
                }
            }
            Some('-') => out.push('-'),
            Some('e') | Some('\\') => out.push('\\'),
            Some(' ') | Some('~') => out.push(' '),
            Some('&') | Some('c') | Some('/') | Some(',') | Some('%') | Some('|') | Some('^') => {}
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// Skip a groff escape's name: one character, or `(` and two.
fn skip_escape_name(chars: &mut impl Iterator<Item = char>) {
    if chars.next() == Some('(') {
        chars.next();
        chars.next();
    }
}

fn html_paragraphs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut rest = text;
    let mut skip_until: Option<&str> = None;
    while let Some(open) = rest.find('<') {
        if skip_until.is_none() {
            current.push_str(&rest[..open]);
        }
        let Some(close) = rest[open..].find('>') else {
            break;
        };
        let tag = rest[open + 1..open + close].to_ascii_lowercase();
        rest = &rest[open + close + 1..];
        let name = tag
            .trim_start_matches('/')
            .split(|c: char| c.is_whitespace() || c == '/')
            .next()
            .unwrap_or("");
        if let Some(end) = skip_until {
            if tag.starts_with('/') && name == end {
                skip_until = None;
            }
            continue;
        }
        match name {
            "script" | "style" | "pre" | "code" | "table" if !tag.starts_with('/') => {
                skip_until = Some(match name {
                    "script" => "script",
                    "style" => "style",
                    "pre" => "pre",
                    "code" => "code",
                    _ => "table",
                });
                flush(&mut current, &mut out);
            }
            "p" | "div" | "br" | "li" | "dt" | "dd" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6"
            | "tr" | "td" | "title" => flush(&mut current, &mut out),
            _ => {}
        }
    }
    flush(&mut current, &mut out);
    out.iter().map(|p| html_entities(p)).collect()
}

fn html_entities(text: &str) -> String {
    text.replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// Split a paragraph into sentences; each keeps its end mark. Whitespace is
/// collapsed first.
fn sentences(paragraph: &str) -> Vec<String> {
    let text: String = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    for i in 0..bytes.len() {
        let end_mark = matches!(bytes[i], b'.' | b'?' | b'!');
        let next_starts = bytes.get(i + 1) == Some(&b' ')
            && bytes
                .get(i + 2)
                .is_some_and(|b| b.is_ascii_uppercase() || *b == b'"');
        if end_mark && next_starts && !ends_with_abbreviation(&text[start..=i]) {
            out.push(text[start..=i].to_string());
            start = i + 2;
        }
    }
    if start < text.len() {
        out.push(text[start..].to_string());
    }
    out
}

fn ends_with_abbreviation(sentence: &str) -> bool {
    let last = sentence.rsplit(' ').next().unwrap_or("");
    matches!(
        last,
        "e.g." | "i.e." | "etc." | "vs." | "Mr." | "Dr." | "cf." | "No." | "Fig."
    ) || (last.len() == 2 && last.as_bytes()[0].is_ascii_uppercase())
}

/// Whether a sentence reads as prose: starts with a capital letter, ends with a
/// full stop, question or exclamation mark, has four or more words and hardly
/// any code punctuation.
fn is_prose(sentence: &str) -> bool {
    let first = sentence.chars().next().unwrap_or(' ');
    let last = sentence.chars().last().unwrap_or(' ');
    if !first.is_uppercase() || !matches!(last, '.' | '?' | '!') {
        return false;
    }
    if sentence.split(' ').count() < 4 {
        return false;
    }
    const CODE: [&str; 10] = [
        "{", "}", " = ", "==", "->", "::", "/*", "$(", "#include", "=>",
    ];
    if CODE.iter().any(|c| sentence.contains(c)) {
        return false;
    }
    let letters = sentence
        .chars()
        .filter(|c| c.is_alphabetic() || *c == ' ')
        .count();
    letters * 100 >= sentence.chars().count() * 80
}

/// Runs of one to three consecutive prose sentences (the length chosen by a
/// hash of the run's first sentence, shorter runs likelier).
fn passages_of(sentences: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < sentences.len() {
        if !is_prose(&sentences[i]) {
            i += 1;
            continue;
        }
        // One sentence half of the time, two 30%, three 20%.
        let want = match xxh3_64(sentences[i].as_bytes()) % 10 {
            0..=4 => 1,
            5..=7 => 2,
            _ => 3,
        };
        let mut passage = sentences[i].clone();
        let mut j = i + 1;
        while j < sentences.len()
            && j < i + want
            && is_prose(&sentences[j])
            && passage.len() + 1 + sentences[j].len() <= MAX_PASSAGE_BYTES
        {
            passage.push(' ');
            passage.push_str(&sentences[j]);
            j += 1;
        }
        if (MIN_PASSAGE_BYTES..=MAX_PASSAGE_BYTES).contains(&passage.len()) {
            out.push(passage);
        }
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rst_prose_is_kept_and_code_is_dropped() {
        let text = "Title\n=====\n\nThis driver handles the device on the bus. It reads the register\nfirst and then the status.\n\nExample::\n\n    int x = read(dev);\n\nThe value is returned to the caller of the function.\n";
        let paras = paragraphs(text, Format::PlainText);
        let all: Vec<String> = paras
            .iter()
            .flat_map(|p| passages_of(&sentences(p)))
            .collect();
        assert!(all
            .iter()
            .any(|p| p.starts_with("This driver handles the device on the bus.")));
        assert!(all.iter().all(|p| !p.contains("int x")));
        assert!(all
            .iter()
            .any(|p| p == "The value is returned to the caller of the function."));
    }

    #[test]
    fn man_escapes_and_requests() {
        let text = ".TH LS 1\n.SH DESCRIPTION\nList information about the \\fBFILEs\\fR (the current\ndirectory by default).\n.PP\nSort entries alphabetically if none of \\-cftuvSUX nor \\fB\\-\\-sort\\fR is specified.\n";
        let paras = man_paragraphs(text);
        assert_eq!(
            paras[0],
            "List information about the FILEs (the current directory by default)."
        );
        assert!(paras[1].contains("--sort"));
    }

    #[test]
    fn html_text_without_tags() {
        let text = "<html><p>The <b>planner</b> chooses a plan &amp; runs it.</p><pre>SELECT 1;</pre><p>Indexes speed up the lookups of rows.</p></html>";
        let paras = html_paragraphs(text);
        assert_eq!(
            paras,
            vec![
                "The planner chooses a plan & runs it.",
                "Indexes speed up the lookups of rows."
            ]
        );
    }

    #[test]
    fn sentences_split_at_marks_not_abbreviations() {
        let s = sentences("Use a tool, e.g. Make to build. Then run it! Does it work?");
        assert_eq!(
            s,
            vec![
                "Use a tool, e.g. Make to build.",
                "Then run it!",
                "Does it work?"
            ]
        );
    }
}
