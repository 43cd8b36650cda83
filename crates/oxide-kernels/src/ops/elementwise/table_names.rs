// The pointwise op names in table order, read from the source text of
// `pointwise.rs`. Plain `//` comments: torch-oxide-ext's build.rs `include!`s
// this file to give the glue compile-time op ids (`oxide_pointwise_ops.h`),
// and a test in `pointwise.rs` proves that the reading equals
// `PointwiseOp::all()` of the compiled table, so the ids cannot drift.

/// The op names of every `family! { ... }` block of `source`, in order: each
/// op is one line `    name = |x, s, c| body;` (raw identifiers lose `r#`).
pub fn pointwise_op_names(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_family = false;
    for line in source.lines() {
        if line.starts_with("family! {") {
            in_family = true;
        } else if in_family && line.starts_with('}') {
            in_family = false;
        } else if in_family {
            let Some(rest) = line.strip_prefix("    ") else { continue };
            let Some((name, body)) = rest.split_once(" = |") else { continue };
            let name = name.strip_prefix("r#").unwrap_or(name);
            if !body.is_empty() && !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                names.push(name.to_string());
            }
        }
    }
    names
}
