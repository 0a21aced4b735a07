//! One sentence per object-storage misconfiguration: what the store was set up with
//! ([`Setup`], read from the builder once its environment and options are applied) and the
//! error a request got become a message that names the URL, what is missing and the variable
//! or option that sets it, with the backend's own error kept after it for those who need it.
//!
//! Plain HTTP without `allow_http` is refused before any request ([`Setup::check`]), and so is a
//! Google Cloud or Azure store with no credentials on a machine that is not one of that cloud's
//! VMs (where the instance-metadata service, the chain's last source, cannot answer: asking it
//! takes seconds and ends in its own text); the other cases are recognised from the first failed
//! request (opening a dataset reads its manifest, so they surface at open): no credentials, an
//! endpoint that cannot be reached, a bucket that does not exist, a bucket in another region,
//! access denied.

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::client::ClientConfigKey;
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};

/// The kind of store, for the words of its messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Kind {
    /// S3 or an S3-compatible store.
    S3,
    /// Google Cloud Storage.
    Gcs,
    /// Azure Blob Storage / Data Lake.
    Azure,
    /// A plain HTTP(S) server (or a store whose set-up is not read).
    #[default]
    Http,
}

/// What a store was set up with (read from its builder; for HTTP only the URL is known).
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// The URL of the dataset.
    pub url: String,
    /// The kind of store.
    pub kind: Kind,
    /// An S3 store (the only kind whose endpoint, region and bucket are read).
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
    /// identity token, container credentials, a service-account or application-default file, a
    /// SAS), or requests are unsigned (`anon=true`).
    pub credentials: bool,
    /// Google Cloud / Azure: an instance-metadata endpoint was named (`GCE_METADATA_HOST`,
    /// `azure_msi_endpoint`, ...), so the chain's last source is asked even off that cloud.
    pub metadata_named: bool,
    /// Azure: no storage account is named (neither in the URL nor in the options).
    pub no_account: bool,
}

/// The files where Linux gives the machine's maker (a cloud's VMs name their cloud there).
const DMI: [&str; 3] = [
    "/sys/class/dmi/id/sys_vendor",
    "/sys/class/dmi/id/product_name",
    "/sys/class/dmi/id/bios_vendor",
];

/// Whether this machine is certainly not a VM of the cloud whose maker's name contains `needle`
/// (`DMI`'s text, as Google's and Azure's own libraries tell): `false` where that cannot be read.
fn off_cloud(dmi: &[Option<String>], needle: &str) -> bool {
    let read: Vec<&String> = dmi.iter().flatten().collect();
    !read.is_empty() && !read.iter().any(|t| t.contains(needle))
}

/// Whether this machine is certainly not a Google Cloud VM (nor a GKE pod or Cloud Run
/// service): its maker is not Google, or, where the maker cannot be read (containers), the
/// metadata server's name does not resolve (one DNS lookup, where object_store would retry it
/// for seconds).
fn off_gcp(dmi: &[Option<String>]) -> bool {
    if dmi.iter().any(Option::is_some) {
        return off_cloud(dmi, "Google");
    }
    use std::net::ToSocketAddrs;
    "metadata.google.internal:80".to_socket_addrs().is_err()
}

fn read_dmi() -> Vec<Option<String>> {
    DMI.iter()
        .map(|p| std::fs::read_to_string(p).ok())
        .collect()
}

/// The sentence for a Google Cloud store without credentials.
fn no_gcs_credentials(url: &str) -> String {
    format!(
        "no credentials were found for {url}: set GOOGLE_APPLICATION_CREDENTIALS to a \
         service-account key file (or storage_options google_service_account=PATH, or \
         google_service_account_key= with the key's JSON), or run `gcloud auth \
         application-default login`; for a public bucket, storage_options anon=true"
    )
}

/// The sentence for an Azure store without credentials.
fn no_azure_credentials(url: &str) -> String {
    format!(
        "no credentials were found for {url}: set AZURE_STORAGE_ACCOUNT_KEY (or \
         AZURE_STORAGE_SAS_KEY, or AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and AZURE_TENANT_ID), \
         or storage_options azure_storage_account_key= (or azure_storage_sas_key=); for a public \
         container, storage_options anon=true"
    )
}

fn truthy(v: Option<String>) -> bool {
    v.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes"))
}

/// What is wrong with a store's set-up before any request ([`Setup::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Misconfigured {
    /// An Azure store whose account is named nowhere.
    #[error(
        "no storage account is named for {url}: set AZURE_STORAGE_ACCOUNT_NAME (or \
         storage_options azure_storage_account_name=), or give the account in the URL \
         (abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH)"
    )]
    NoAzureAccount {
        /// The dataset's URL.
        url: String,
    },
    /// A Google Cloud store without credentials, off Google Cloud.
    #[error("{}", no_gcs_credentials(.url))]
    NoGcsCredentials {
        /// The dataset's URL.
        url: String,
    },
    /// An Azure store without credentials, off Azure.
    #[error("{}", no_azure_credentials(.url))]
    NoAzureCredentials {
        /// The dataset's URL.
        url: String,
    },
    /// A plain-HTTP endpoint that is not allowed.
    #[error(
        "the endpoint {endpoint} is plain HTTP, which is refused unless allowed: set \
         AWS_ALLOW_HTTP=true (or storage_options allow_http=true) for a test server, or give an \
         https:// endpoint"
    )]
    PlainHttp {
        /// The endpoint as given.
        endpoint: String,
    },
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
            kind: Kind::S3,
            s3: true,
            bucket: get(AmazonS3ConfigKey::Bucket).unwrap_or_default(),
            endpoint: get(AmazonS3ConfigKey::Endpoint),
            region: get(AmazonS3ConfigKey::Region),
            allow_http: truthy(get(AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp))),
            credentials: keys || other || truthy(get(AmazonS3ConfigKey::SkipSignature)),
            ..Setup::default()
        }
    }

    /// The set-up of a Google Cloud Storage builder (environment and options applied).
    pub fn of_gcs(url: &str, b: &GoogleCloudStorageBuilder) -> Setup {
        let get = |k: GoogleConfigKey| b.get_config_value(&k).filter(|v| !v.is_empty());
        // the application-default file `gcloud auth application-default login` writes
        let adc = std::env::var_os("HOME").is_some_and(|h| {
            std::path::Path::new(&h)
                .join(".config/gcloud/application_default_credentials.json")
                .exists()
        });
        let credentials = get(GoogleConfigKey::ServiceAccount).is_some()
            || get(GoogleConfigKey::ServiceAccountKey).is_some()
            || get(GoogleConfigKey::ApplicationCredentials).is_some()
            || adc
            || truthy(get(GoogleConfigKey::SkipSignature));
        Setup {
            url: url.to_string(),
            kind: Kind::Gcs,
            credentials,
            metadata_named: ["GCE_METADATA_HOST", "GCE_METADATA_ROOT", "GCE_METADATA_IP"]
                .iter()
                .any(|v| std::env::var_os(v).is_some()),
            ..Setup::default()
        }
    }

    /// The set-up of an Azure builder (environment and options applied).
    pub fn of_azure(url: &str, b: &MicrosoftAzureBuilder) -> Setup {
        let get = |k: AzureConfigKey| b.get_config_value(&k).filter(|v| !v.is_empty());
        let has = |k: AzureConfigKey| get(k).is_some();
        let emulator = truthy(get(AzureConfigKey::UseEmulator));
        let credentials = emulator
            || has(AzureConfigKey::AccessKey)
            || has(AzureConfigKey::SasKey)
            || has(AzureConfigKey::Token)
            || (has(AzureConfigKey::ClientId)
                && has(AzureConfigKey::AuthorityId)
                && (has(AzureConfigKey::ClientSecret) || has(AzureConfigKey::FederatedTokenFile)))
            || truthy(get(AzureConfigKey::UseAzureCli))
            || has(AzureConfigKey::FabricTokenServiceUrl)
            || truthy(get(AzureConfigKey::SkipSignature));
        // the account is in the URL's host (`abfs://c@account.dfs.core.windows.net`,
        // `https://account.blob.core.windows.net`) or in the options
        let host_names_account = url::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.contains('.')))
            .unwrap_or(false);
        Setup {
            url: url.to_string(),
            kind: Kind::Azure,
            credentials,
            metadata_named: has(AzureConfigKey::MsiEndpoint),
            no_account: !emulator && !host_names_account && !has(AzureConfigKey::AccountName),
            ..Setup::default()
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
    /// would fail every request with "builder error", naming nothing); an Azure store with no
    /// account; a Google Cloud or Azure store with no credentials off that cloud.
    pub fn check(&self) -> Result<(), Misconfigured> {
        let asks_metadata = !self.credentials && !self.metadata_named;
        let off = match self.kind {
            Kind::Gcs if asks_metadata => off_gcp(&read_dmi()),
            Kind::Azure if asks_metadata => off_cloud(&read_dmi(), "Microsoft"),
            _ => false,
        };
        self.check_on(off)
    }

    /// [`Setup::check`] on a machine that is (`off`: certainly not) a VM of the store's cloud.
    fn check_on(&self, off: bool) -> Result<(), Misconfigured> {
        if self.kind == Kind::Azure && self.no_account {
            return Err(Misconfigured::NoAzureAccount {
                url: self.url.clone(),
            });
        }
        if !self.credentials && !self.metadata_named && off {
            match self.kind {
                Kind::Gcs => {
                    return Err(Misconfigured::NoGcsCredentials {
                        url: self.url.clone(),
                    });
                }
                Kind::Azure => {
                    return Err(Misconfigured::NoAzureCredentials {
                        url: self.url.clone(),
                    });
                }
                _ => {}
            }
        }
        match &self.endpoint {
            Some(ep)
                if self.s3
                    && !self.allow_http
                    && ep.to_ascii_lowercase().starts_with("http://") =>
            {
                Err(Misconfigured::PlainHttp {
                    endpoint: ep.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The endpoint requests go to, as a person would name it.
    fn endpoint_name(&self) -> String {
        if !self.s3 {
            // the URL's own host (an HTTP server), or the cloud's service
            return match self.kind {
                Kind::Gcs => "https://storage.googleapis.com".to_string(),
                Kind::Azure => "the storage account's endpoint".to_string(),
                _ => url::Url::parse(&self.url)
                    .ok()
                    .map(|u| u[..url::Position::BeforePath].to_string())
                    .unwrap_or_else(|| self.url.clone()),
            };
        }
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
        let metadata = has("169.254.169.254")
            || has("metadata")
            || has("credential")
            || has("token request")
            || has("Error performing token");
        if !self.credentials && (connect || metadata) {
            match self.kind {
                Kind::Gcs => return Some(no_gcs_credentials(&self.url)),
                Kind::Azure => return Some(no_azure_credentials(&self.url)),
                _ => {}
            }
        }
        if connect && !self.s3 {
            return Some(format!(
                "cannot reach {} for {}: check the URL, the network, and that the server is \
                 running",
                self.endpoint_name(),
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
            let which = match self.kind {
                Kind::S3 => "the credentials (AWS_ACCESS_KEY_ID / storage_options key=)",
                Kind::Gcs => "the credentials (GOOGLE_APPLICATION_CREDENTIALS's account)",
                Kind::Azure => "the credentials (the account key, SAS or client)",
                Kind::Http => "the credentials",
            };
            return Some(format!(
                "access denied to {}: {which} are not allowed to read it, or the key or its \
                 secret is wrong",
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
            kind: Kind::S3,
            s3: true,
            bucket: "b".into(),
            endpoint: endpoint.map(String::from),
            region: Some("eu-west-1".into()),
            allow_http: false,
            credentials,
            ..Setup::default()
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
        let e = s3(Some("http://127.0.0.1:9000"), true)
            .check()
            .unwrap_err()
            .to_string();
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
    fn a_cloud_store_without_credentials_is_refused_off_that_cloud_before_any_request() {
        let gcs = Setup {
            url: "gs://b/ds".into(),
            kind: Kind::Gcs,
            ..Setup::default()
        };
        let e = gcs.check_on(true).unwrap_err().to_string();
        assert!(
            e.contains("no credentials were found for gs://b/ds")
                && e.contains("GOOGLE_APPLICATION_CREDENTIALS")
                && e.contains("anon=true"),
            "{e}"
        );
        // on the cloud (or not known to be off it) the metadata service is asked
        assert!(gcs.check_on(false).is_ok());
        let with_key = Setup {
            credentials: true,
            ..gcs.clone()
        };
        assert!(with_key.check_on(true).is_ok());
        let az = Setup {
            url: "az://c/ds".into(),
            kind: Kind::Azure,
            ..Setup::default()
        };
        let e = az.check_on(true).unwrap_err().to_string();
        assert!(
            e.contains("no credentials were found for az://c/ds")
                && e.contains("AZURE_STORAGE_ACCOUNT_KEY")
                && e.contains("azure_storage_account_key="),
            "{e}"
        );
        let no_account = Setup {
            no_account: true,
            credentials: true,
            ..az.clone()
        };
        let e = no_account.check_on(false).unwrap_err().to_string();
        assert!(
            e.contains("no storage account is named for az://c/ds")
                && e.contains("AZURE_STORAGE_ACCOUNT_NAME"),
            "{e}"
        );
        // the maker's names tell a cloud's VMs from other machines; none readable: unknown
        let dmi = |v: &str| vec![Some(v.to_string()), None, None];
        assert!(off_cloud(&dmi("QEMU\n"), "Google"));
        assert!(!off_cloud(&dmi("Google\n"), "Google"));
        assert!(!off_cloud(&dmi("Microsoft Corporation\n"), "Microsoft"));
        assert!(!off_cloud(&[None, None, None], "Microsoft"));
        assert!(off_gcp(&dmi("Amazon EC2\n")));
    }

    #[test]
    fn a_cloud_store_whose_metadata_service_fails_says_which_credentials_are_missing() {
        let token = generic(
            "Error performing token request: Error after 0 retries: error sending request for \
             url (http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token)",
        );
        let gcs = Setup {
            url: "gs://b/ds".into(),
            kind: Kind::Gcs,
            ..Setup::default()
        };
        let m = gcs.diagnose(&token).unwrap();
        assert!(
            m.contains("no credentials were found for gs://b/ds")
                && m.contains("GOOGLE_APPLICATION_CREDENTIALS"),
            "{m}"
        );
        let az = Setup {
            url: "az://c/ds".into(),
            kind: Kind::Azure,
            ..Setup::default()
        };
        let imds = generic(
            "Error performing token request: HTTP status client error (403 Forbidden) for url \
             (http://169.254.169.254/metadata/identity/oauth2/token)",
        );
        let m = az.diagnose(&imds).unwrap();
        assert!(m.contains("AZURE_STORAGE_ACCOUNT_KEY"), "{m}");
        assert!(!m.contains("169.254"), "{m}");
    }

    #[test]
    fn an_unreachable_https_server_is_named_not_aws() {
        let refused = generic(
            "error sending request: client error (Connect): tcp connect error: Connection refused (os error 111)",
        );
        let m = Setup::other("https://127.0.0.1:9/data/ds")
            .diagnose(&refused)
            .unwrap();
        assert!(
            m.contains("cannot reach https://127.0.0.1:9 for https://127.0.0.1:9/data/ds"),
            "{m}"
        );
        assert!(!m.contains("AWS"), "{m}");
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
