//! Credentials out of text that reaches logs, errors and pages.

use std::sync::OnceLock;

/// `message` with credentials removed: the user-info part of URLs (`https://user:pass@host`),
/// `Bearer`/`Basic` credentials and `token=`/`password=` values. Only credentials: "basic
/// auth" or "bearer token file" in prose stay as they are.
pub fn redact(message: &str) -> String {
    static PATTERNS: OnceLock<[(regex::Regex, &str); 2]> = OnceLock::new();
    static SCHEME: OnceLock<regex::Regex> = OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        let re = |p: &str| regex::Regex::new(p).expect("valid pattern");
        [
            (re(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@"), "${1}***@"),
            (
                re(r#"(?i)\b(token|password|passwd|secret)(["']?\s*[=:]\s*["']?)[^\s"'&,;]+"#),
                "${1}${2}***",
            ),
        ]
    });
    // An Authorization scheme and its credentials (RFC 9110 §11.4: token68).
    let scheme = SCHEME.get_or_init(|| {
        regex::Regex::new(r"(?i)(\bauthorization\s*:\s*)?\b(bearer|basic)\s+([A-Za-z0-9._~+/-]+=*)")
            .expect("valid pattern")
    });
    let mut out = message.to_string();
    for (re, with) in patterns {
        out = re.replace_all(&out, *with).into_owned();
    }
    scheme
        .replace_all(&out, |c: &regex::Captures<'_>| {
            let credential = &c[3];
            if c.get(1).is_some() || looks_like_credential(credential) {
                format!("{}{} ***", c.get(1).map_or("", |m| m.as_str()), &c[2])
            } else {
                c[0].to_string()
            }
        })
        .into_owned()
}

/// Whether a word after `Bearer`/`Basic` outside an `Authorization:` header is a credential
/// rather than prose: tokens and base64 carry digits or symbols, mix cases inside the word
/// (`dXNlcjpwYXNz`), or are longer than words; prose is `auth`, `Token`, `HTTP`.
fn looks_like_credential(word: &str) -> bool {
    let inner = word.get(1..).unwrap_or("");
    word.len() >= 20
        || word
            .chars()
            .any(|c| c.is_ascii_digit() || "._~+/=-".contains(c))
        || (inner.chars().any(|c| c.is_ascii_uppercase())
            && word.chars().any(|c| c.is_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_stripped() {
        assert_eq!(
            redact("Get \"https://admin:s3cret@10.0.0.1:6443/api\": refused"),
            "Get \"https://***@10.0.0.1:6443/api\": refused"
        );
        assert_eq!(
            redact("Authorization: Bearer eyJhbGciOi.x-y_z"),
            "Authorization: Bearer ***"
        );
        assert_eq!(
            redact("password=hunter2&user=kerf, \"token\": \"abc\""),
            "password=***&user=kerf, \"token\": \"***\""
        );
        assert_eq!(
            redact("http://prometheus:9090/api/v1/query_range: timed out"),
            "http://prometheus:9090/api/v1/query_range: timed out"
        );
        assert_eq!(
            redact("sent Basic dXNlcjpwYXNz to the proxy; bearer abcdefghijklmnopqrstuvwxyz"),
            "sent Basic *** to the proxy; bearer ***"
        );
        assert_eq!(
            redact("authorization: Basic kerf"),
            "authorization: Basic ***",
            "in an Authorization header any word is the credential"
        );
    }

    #[test]
    fn words_in_prose_are_not_credentials() {
        for prose in [
            "401 Unauthorized: basic auth failed, check --prometheus-basic-auth-user",
            "the bearer token file is empty",
            "Prometheus asks for Basic authentication",
            "use a Bearer token or basic credentials",
        ] {
            assert_eq!(redact(prose), prose);
        }
    }
}
