//! One sentence per object-storage misconfiguration: what the store was set up with
//! ([`Setup`], read from the builder once its environment and options are applied) and the
//! error a request got become a message that names the URL, what is missing and the variable
//! or option that sets it, with the backend's own error kept after it for those who need it.
//!
//! Plain HTTP without `allow_http` is refused before any request ([`Setup::check`]); the other
//! cases are recognised from the first failed request (opening a dataset reads its manifest, so
//! they surface at open): no credentials, an endpoint that cannot be reached, a bucket that does
//! not exist, a bucket in another region, access denied.

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::client::ClientConfigKey;

/// What an S3 store was set up with (for other stores only the URL is known).
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// The URL of the dataset.
    pub url: String,
    /// An S3 store (the only kind whose set-up is read).
    pub s3: bool,
    /// The bucket.
    pub bucket: String,
    /// The endpoint given (`AWS_ENDPOINT_URL` / `endpoint_url=`), if any.
    pub endpoint: Option<String>,
    /// The region given (`AWS_REGION` / `region_name=`), if any.
    pub region: Option<String>,
    /// Plain HTTP allowed (`AWS_ALLOW_HTTP` / `allow_http=`).
    pub allow_http: bool,
    /// Credentials are given some way other than the instance-metadata service (keys, a web
    /// identity token, container credentials), or requests are unsigned (`anon=true`).
    pub credentials: bool,
}

fn truthy(v: Option<String>) -> bool {
    v.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes"))
}

impl Setup {
    /// The set-up of an S3 builder (environment and options applied).
    pub fn of_s3(url: &str, b: &AmazonS3Builder) -> Setup {
        let get = |k: AmazonS3ConfigKey| b.get_config_value(&k).filter(|v| !v.is_empty());
        let keys = get(AmazonS3ConfigKey::AccessKeyId).is_some()
            && get(AmazonS3ConfigKey::SecretAccessKey).is_some();
        let other = get(AmazonS3ConfigKey::WebIdentityTokenFile).is_some()
            || get(AmazonS3ConfigKey::ContainerCredentialsRelativeUri).is_some()
            || std::env::var_os("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some();
        Setup {
            url: url.to_string(),
            s3: true,
            bucket: get(AmazonS3ConfigKey::Bucket).unwrap_or_default(),
            endpoint: get(AmazonS3ConfigKey::Endpoint),
            region: get(AmazonS3ConfigKey::Region),
            allow_http: truthy(get(AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp))),
            credentials: keys || other || truthy(get(AmazonS3ConfigKey::SkipSignature)),
        }
    }

    /// The set-up of a store whose configuration is not read (only its URL is named).
    pub fn other(url: &str) -> Setup {
        Setup {
            url: url.to_string(),
            ..Setup::default()
        }
    }

    /// What is wrong before any request: a plain-HTTP endpoint that is not allowed (the client
    /// would fail every request with "builder error", naming nothing).
    pub fn check(&self) -> Result<(), String> {
        match &self.endpoint {
            Some(ep)
                if self.s3
                    && !self.allow_http
                    && ep.to_ascii_lowercase().starts_with("http://") =>
            {
                Err(format!(
                    "the endpoint {ep} is plain HTTP, which is refused unless allowed: set \
                     AWS_ALLOW_HTTP=true (or storage_options allow_http=true) for a test server, \
                     or give an https:// endpoint"
                ))
            }
            _ => Ok(()),
        }
    }

    /// The endpoint requests go to, as a person would name it.
    fn endpoint_name(&self) -> String {
        match (&self.endpoint, &self.region) {
            (Some(ep), _) => ep.clone(),
            (None, Some(r)) => format!("https://s3.{r}.amazonaws.com (AWS, region {r})"),
            (None, None) => "AWS's default endpoint".to_string(),
        }
    }

    /// The sentence for error `e` of a request, when it is one of the known misconfigurations
    /// (`None`: the backend's error is the message).
    pub fn diagnose(&self, e: &object_store::Error) -> Option<String> {
        let text = chain(e);
        let has = |s: &str| text.contains(s);
        let connect = has("error sending request")
            || has("Connection refused")
            || has("connection refused")
            || has("dns error")
            || has("tcp connect")
            || has("client error (Connect)");
        if self.s3
            && !self.credentials
            && (connect || has("169.254.169.254") || has("metadata") || has("credential"))
        {
            // the credential chain ended at the instance-metadata service (the last source it
            // tries), which is what failed: say what was missing, not what that service said
            return Some(format!(
                "no credentials were found for {}: set AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY (or storage_options key= and secret=, or AWS_PROFILE's \
                 keys exported); for a public bucket, storage_options anon=true",
                self.url
            ));
        }
        if connect {
            return Some(format!(
                "cannot reach the endpoint {} for {}: check AWS_ENDPOINT_URL (or storage_options \
                 endpoint_url=) and that the server is running",
                self.endpoint_name(),
                self.url
            ));
        }
        if has("NoSuchBucket")
            || (matches!(e, object_store::Error::NotFound { .. }) && has("bucket does not exist"))
        {
            return Some(format!(
                "the bucket {:?} does not exist at {}: check the bucket in {} and AWS_ENDPOINT_URL",
                self.bucket,
                self.endpoint_name(),
                self.url
            ));
        }
        if has("PermanentRedirect")
            || has("AuthorizationHeaderMalformed")
            || has("IncorrectEndpoint")
            || has("301 Moved Permanently")
        {
            return Some(format!(
                "the bucket {:?} is in another region than {}: set AWS_REGION (or storage_options \
                 region_name=) to the bucket's region",
                self.bucket,
                self.region
                    .as_deref()
                    .unwrap_or("the default one (us-east-1)")
            ));
        }
        if matches!(
            e,
            object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }
        ) || has("SignatureDoesNotMatch")
            || has("InvalidAccessKeyId")
            || has("AccessDenied")
        {
            return Some(format!(
                "access denied to {}: the credentials (AWS_ACCESS_KEY_ID / storage_options key=) \
                 are not allowed to read it, or the key or its secret is wrong",
                self.url
            ));
        }
        None
    }
}

/// `e` and its sources, `: `-separated (object_store keeps the HTTP client's reason in them).
fn chain(e: &object_store::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(endpoint: Option<&str>, credentials: bool) -> Setup {
        Setup {
            url: "s3://b/ds".into(),
            s3: true,
            bucket: "b".into(),
            endpoint: endpoint.map(String::from),
            region: Some("eu-west-1".into()),
            allow_http: false,
            credentials,
        }
    }

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: text.to_string().into(),
        }
    }

    #[test]
    fn plain_http_is_refused_before_any_request_naming_the_variable() {
        let e = s3(Some("http://127.0.0.1:9000"), true).check().unwrap_err();
        assert!(
            e.contains("AWS_ALLOW_HTTP=true") && e.contains("http://127.0.0.1:9000"),
            "{e}"
        );
        let allowed = Setup {
            allow_http: true,
            ..s3(Some("http://127.0.0.1:9000"), true)
        };
        assert!(allowed.check().is_ok());
        assert!(s3(Some("https://minio.example"), true).check().is_ok());
    }

    #[test]
    fn each_misconfiguration_gets_its_sentence() {
        // the texts as S3 and the HTTP client give them (moto does not emulate regions or
        // signatures; the end-to-end cases are in the tests of the CLI and the format)
        let region = generic(
            "Received redirect without LOCATION, this normally indicates an incorrectly configured region: <Code>PermanentRedirect</Code>",
        );
        let m = s3(None, true).diagnose(&region).unwrap();
        assert!(
            m.contains("another region than eu-west-1") && m.contains("AWS_REGION"),
            "{m}"
        );
        let denied = object_store::Error::PermissionDenied {
            path: "ds/manifest.json".into(),
            source: "403 Forbidden: <Code>AccessDenied</Code>"
                .to_string()
                .into(),
        };
        let m = s3(None, true).diagnose(&denied).unwrap();
        assert!(
            m.contains("access denied to s3://b/ds") && m.contains("AWS_ACCESS_KEY_ID"),
            "{m}"
        );
        let bucket = generic(
            "<Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message>",
        );
        let m = s3(Some("http://127.0.0.1:1"), true)
            .diagnose(&bucket)
            .unwrap();
        assert!(
            m.contains("bucket \"b\" does not exist at http://127.0.0.1:1"),
            "{m}"
        );
        let refused = generic(
            "error sending request: client error (Connect): tcp connect error: Connection refused (os error 111)",
        );
        let m = s3(Some("http://127.0.0.1:1"), true)
            .diagnose(&refused)
            .unwrap();
        assert!(
            m.contains("cannot reach the endpoint http://127.0.0.1:1")
                && m.contains("AWS_ENDPOINT_URL"),
            "{m}"
        );
        let metadata = generic(
            "Error performing token request: Error after 0 retries: HTTP status client error (403 Forbidden) for url (http://169.254.169.254/latest/api/token)",
        );
        let m = s3(None, false).diagnose(&metadata).unwrap();
        assert!(
            m.contains("no credentials were found for s3://b/ds")
                && m.contains("AWS_ACCESS_KEY_ID"),
            "{m}"
        );
        assert!(!m.contains("169.254"), "{m}");
        assert!(s3(None, true).diagnose(&generic("503 Slow Down")).is_none());
        assert!(
            Setup::other("gs://b/ds")
                .diagnose(&generic("503"))
                .is_none()
        );
    }
}
