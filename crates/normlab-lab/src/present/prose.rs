//! Long generated prose made readable: a text over the paragraph limit
//! (120 words, the limit the documentation keeps) is cut at its clause
//! boundaries ("; " and sentence ends outside brackets) into a list whose
//! items stay under the limit. Nothing is dropped or reworded.

/// The longest prose paragraph the documentation keeps, in words.
pub const MAX_PARAGRAPH_WORDS: usize = 120;

/// `text` as one paragraph when it is short enough, else as a markdown
/// list of consecutive pieces (each piece at most `MAX_PARAGRAPH_WORDS`
/// words unless one clause alone is longer), preceded by `lead` (kept on
/// the list's first line when given, e.g. "**Verdict: holds.**").
pub fn readable(lead: &str, text: &str) -> String {
    let words = |s: &str| s.split_whitespace().count();
    let joined = |s: &str| {
        if lead.is_empty() {
            s.to_string()
        } else if s.is_empty() {
            lead.to_string()
        } else {
            format!("{lead} {s}")
        }
    };
    if words(&joined(text)) <= MAX_PARAGRAPH_WORDS {
        return joined(text);
    }
    // Group clauses greedily into pieces of at most ~half the limit, so
    // each list item reads as one thought.
    let target = MAX_PARAGRAPH_WORDS / 2;
    let mut pieces: Vec<String> = Vec::new();
    let mut cur = String::new();
    for c in clauses(text) {
        if !cur.is_empty() && words(&cur) + words(&c) > target {
            pieces.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(&c);
    }
    if !cur.is_empty() {
        pieces.push(cur);
    }
    let mut out = String::new();
    if !lead.is_empty() {
        out.push_str(lead);
        out.push_str("\n\n");
    }
    let items: Vec<String> = pieces.iter().map(|p| format!("- {p}")).collect();
    out.push_str(&items.join("\n"));
    out
}

/// The clauses of `text`: cut after "; " and after a sentence's ". " when
/// not inside brackets; each clause keeps its own punctuation.
fn clauses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &ch) in chars.iter().enumerate() {
        cur.push(ch);
        match ch {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            _ => {}
        }
        let next_space = chars.get(i + 1).is_some_and(|c| *c == ' ');
        // A period ends a clause only before a space and a capital letter
        // ("e.g. the", "x1.2 at" are not sentence ends).
        let next_upper = chars.get(i + 2).is_some_and(|c| c.is_uppercase());
        let cut = depth <= 0 && next_space && (ch == ';' || (ch == '.' && next_upper));
        if cut {
            out.push(cur.trim().to_string());
            cur.clear();
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_becomes_a_list_of_short_items_with_every_word_kept() {
        let clause = "the stream grows (x1.21, range x1.19-x1.23; monotone) at every depth";
        let text: Vec<String> = (0..20).map(|i| format!("{clause} {i}")).collect();
        let text = text.join("; ");
        let out = readable("**Verdict: holds.**", &text);
        assert!(out.starts_with("**Verdict: holds.**\n\n- "), "{out}");
        let items: Vec<&str> = out.lines().filter(|l| l.starts_with("- ")).collect();
        assert!(items.len() > 1, "{out}");
        for it in &items {
            assert!(
                it.split_whitespace().count() <= MAX_PARAGRAPH_WORDS + 1,
                "{it}"
            );
        }
        // Every word of the input, in order.
        let back: Vec<&str> = items
            .iter()
            .flat_map(|l| l[2..].split_whitespace())
            .collect();
        let want: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(back, want);
        // A bracket's "; " is not a cut.
        assert!(items
            .iter()
            .all(|l| l.matches('(').count() == l.matches(')').count()));
    }

    #[test]
    fn a_short_text_stays_one_paragraph() {
        assert_eq!(
            readable("**Verdict: holds.**", "x grows."),
            "**Verdict: holds.** x grows."
        );
        assert_eq!(readable("", "x grows."), "x grows.");
    }
}
