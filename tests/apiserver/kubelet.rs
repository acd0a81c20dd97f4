//! The kubelet's part for one pod, played with podman: the apiserver tier has no kubelet, so the
//! in-cluster tests run the operator image the way a kubelet would run the Deployment's pod —
//! its container's args and env (downward API resolved), its security context, and the
//! ServiceAccount's token (TokenRequest), CA and namespace mounted at
//! `/var/run/secrets/kubernetes.io/serviceaccount`, with `KUBERNETES_SERVICE_HOST`/`PORT` set.
//! The image comes from `tests/image/build.sh` (`NODEROTATION_IMAGE`, `NODEROTATION_PODMAN`).
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::support::{Env, Error, free_port, scrape};

/// The image under test, if `tests/image/build.sh` was run: (podman command line, image).
pub fn image() -> Option<(Vec<String>, String)> {
    let podman = std::env::var("NODEROTATION_PODMAN").ok()?;
    let image = std::env::var("NODEROTATION_IMAGE").ok()?;
    Some((podman.split_whitespace().map(str::to_string).collect(), image))
}

/// A pod's container running under podman; removed (`podman rm -f`) on drop.
pub struct PodContainer {
    podman: Vec<String>,
    pub name: String,
    child: Child,
    pub log: PathBuf,
    pub metrics_port: u16,
}

/// The API server's address as a pod sees it: `KUBERNETES_SERVICE_HOST` and `_PORT`.
fn service_address(env: &Env) -> Result<(String, String), Error> {
    let kc = kube::config::Kubeconfig::read_from(&env.kubeconfig)?;
    let server = kc
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .ok_or("the harness kubeconfig names no server")?;
    let hostport = server.trim_start_matches("https://").trim_end_matches('/');
    let (host, port) = hostport.rsplit_once(':').ok_or("server without a port")?;
    Ok((host.to_string(), port.to_string()))
}

/// The projected ServiceAccount volume: a fresh token for `sa`, the cluster CA, the namespace.
fn service_account_volume(env: &Env, ns: &str, sa: &str, dir: &Path) -> Result<(), Error> {
    let token = env.kubectl_ok(&["create", "token", sa, "-n", ns, "--duration", "1h"], None)?;
    let ca64 = env.kubectl_ok(
        &[
            "config",
            "view",
            "--raw",
            "-o",
            "jsonpath={.clusters[0].cluster.certificate-authority-data}",
        ],
        None,
    )?;
    // A ByteString deserializes from base64, as the API serves `data` fields.
    let ca: k8s_openapi::ByteString = serde_json::from_value(Value::String(ca64.trim().into()))?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("token"), token.trim())?;
    std::fs::write(dir.join("ca.crt"), ca.0)?;
    std::fs::write(dir.join("namespace"), ns)?;
    // The container runs as 65532: the files must be readable by it, as the kubelet makes them.
    use std::os::unix::fs::PermissionsExt;
    for f in ["token", "ca.crt", "namespace"] {
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o644))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// A container env value: literal, or the downward API fields a Deployment uses.
fn env_value(e: &Value, ns: &str, pod: &str) -> Result<Option<String>, Error> {
    if let Some(v) = e["value"].as_str() {
        return Ok(Some(v.to_string()));
    }
    match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
        Some("metadata.namespace") => Ok(Some(ns.to_string())),
        Some("metadata.name") => Ok(Some(pod.to_string())),
        Some(other) => Err(format!("downward API field {other} is not emulated").into()),
        None if e["valueFrom"].is_null() => Ok(None),
        None => Err(format!("env {} uses a source this emulation lacks", e["name"]).into()),
    }
}

impl PodContainer {
    /// Runs the first container of `deployment` (a Deployment as rendered) as pod `pod`.
    /// `env_overrides` replace container env values (the metrics address must be a free host
    /// port: the container shares the host's network); `extra_args` are appended to its args.
    pub fn start(
        env: &Env,
        deployment: &Value,
        pod: &str,
        env_overrides: &[(&str, String)],
        extra_args: &[&str],
        dir: &Path,
    ) -> Result<PodContainer, Error> {
        let (podman, image) = image().ok_or("NODEROTATION_IMAGE / NODEROTATION_PODMAN unset")?;
        let ns = deployment["metadata"]["namespace"].as_str().ok_or("deployment namespace")?;
        let spec = &deployment["spec"]["template"]["spec"];
        let sa = spec["serviceAccountName"].as_str().unwrap_or("default");
        let container = &spec["containers"][0];
        let sa_dir = dir.join(format!("{pod}-serviceaccount"));
        service_account_volume(env, ns, sa, &sa_dir)?;
        let (host, port) = service_address(env)?;
        let metrics_port = free_port()?;

        let mut args: Vec<String> = podman.clone();
        args.extend(["run", "--rm", "--network=host", "--name", pod].map(String::from));
        args.push(format!("--env=KUBERNETES_SERVICE_HOST={host}"));
        args.push(format!("--env=KUBERNETES_SERVICE_PORT={port}"));
        args.push(format!(
            "--volume={}:/var/run/secrets/kubernetes.io/serviceaccount:ro",
            sa_dir.display()
        ));
        // The pod shares the host's network here: its metrics and probe ports become free host
        // ports.
        let metrics = ("NODEROTATION_METRICS_ADDR", format!("127.0.0.1:{metrics_port}"));
        let health = ("NODEROTATION_HEALTH_ADDR", format!("127.0.0.1:{}", free_port()?));
        let env_overrides: Vec<(&str, String)> =
            env_overrides.iter().cloned().chain([metrics, health]).collect();
        for e in container["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().ok_or("env without a name")?;
            let value = match env_overrides.iter().find(|(k, _)| *k == name) {
                Some((_, v)) => Some(v.clone()),
                None => env_value(e, ns, pod)?,
            };
            if let Some(v) = value {
                args.push(format!("--env={name}={v}"));
            }
        }
        for (k, v) in &env_overrides {
            if !container["env"].as_array().into_iter().flatten().any(|e| e["name"] == *k) {
                args.push(format!("--env={k}={v}"));
            }
        }
        // The pod's and the container's security context, as the kubelet applies them.
        let psc = &spec["securityContext"];
        let csc = &container["securityContext"];
        let user = csc["runAsUser"].as_i64().or(psc["runAsUser"].as_i64());
        let group = csc["runAsGroup"].as_i64().or(psc["runAsGroup"].as_i64());
        if let Some(u) = user {
            args.push(format!("--user={u}:{}", group.unwrap_or(u)));
        }
        if csc["readOnlyRootFilesystem"] == true {
            args.push("--read-only".into());
        }
        if csc["allowPrivilegeEscalation"] == false {
            args.push("--security-opt=no-new-privileges".into());
        }
        for cap in csc["capabilities"]["drop"].as_array().into_iter().flatten() {
            args.push(format!("--cap-drop={}", cap.as_str().unwrap_or("ALL")));
        }
        if let Some(cmd) = container["command"].as_array() {
            let cmd: Vec<&str> = cmd.iter().filter_map(Value::as_str).collect();
            args.push(format!("--entrypoint={}", cmd.first().ok_or("empty command")?));
        }
        args.push(image);
        if let Some(cmd) = container["command"].as_array() {
            args.extend(cmd.iter().skip(1).filter_map(Value::as_str).map(str::to_string));
        }
        args.extend(
            container["args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string),
        );
        args.extend(extra_args.iter().map(|a| a.to_string()));

        let log = dir.join(format!("{pod}.log"));
        let file = std::fs::File::create(&log)?;
        std::fs::write(dir.join(format!("{pod}.podman-args")), args.join("\n"))?;
        let child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()?;
        Ok(PodContainer { podman, name: pod.to_string(), child, log, metrics_port })
    }

    /// SIGTERM through podman (the kubelet's stop), waiting up to 10 s before SIGKILL.
    pub fn stop(mut self) {
        let _ = Command::new(&self.podman[0])
            .args(&self.podman[1..])
            .args(["stop", "-t", "10", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The container exited (with its status), or `None` while it runs.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub async fn metrics(&self) -> Result<String, Error> {
        scrape(self.metrics_port).await
    }
}

impl Drop for PodContainer {
    fn drop(&mut self) {
        let _ = Command::new(&self.podman[0])
            .args(&self.podman[1..])
            .args(["rm", "-f", "-t", "2", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
