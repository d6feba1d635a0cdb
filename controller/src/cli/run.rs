//! `stepctl run`, `attach` and `hijack`: a process through the shim, its output on our terminal, our
//! exit status its own. `run` also creates the step pod first and deletes it after.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use client::ShimClient;
use controller::hermetic;
use controller::image::{ImageFrom, ImageVolume};
use controller::image_source::{self, StepImages};
use controller::podspec::{self, Delivery, StepSpec};
use controller::runtime::Runtime;
use protocol::SpawnRequest;

use super::args::{AttachArgs, DeliveryArg, HijackArgs, RunArgs};
use super::{Target, inputs, lost, random_suffix, term};

/// How long a process gets between TERM and KILL after Ctrl-C.
const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

/// Runs the command; returns the exit code.
pub async fn run(target: &Target, args: RunArgs) -> Result<i32> {
    let mut spec = spawn_request(&args)?;
    let how = if args.through_controller {
        controller::transfer::How::Controller
    } else {
        controller::transfer::How::Direct
    };
    let workdir = args
        .dir
        .clone()
        .unwrap_or_else(|| inputs::DEFAULT_DIR.to_owned());
    let prepare = |shim: ShimClient| {
        let (workdir, ins, outs) = (workdir.clone(), args.inputs.clone(), args.outputs.clone());
        async move { inputs::prepare(target, &shim, &workdir, &ins, &outs, how).await }
    };
    if !args.inputs.is_empty() && spec.dir.is_none() {
        spec.dir = Some(workdir.clone());
    }
    match target {
        Target::Local(_) if args.image_from.is_some() || !args.image_volume.is_empty() => {
            bail!("--image-from and --image-volume need a cluster: the kubelet pulls the image")
        }
        Target::Local(_) if args.hermetic || args.certs_configmap.is_some() => {
            bail!("--hermetic and --certs-configmap need a cluster: they describe the step's pod")
        }
        Target::Local(local) => {
            pod_options(&args)?;
            prepare(local.client.clone()).await?;
            run_process(&local.client, &args.id, &spec, None).await
        }
        Target::Cluster(rt) => run_in_pod(rt, &args, &spec, prepare).await,
    }
}

/// The process `run` spawns: the command, its environment, and a terminal of our window's size.
fn spawn_request(args: &RunArgs) -> Result<SpawnRequest> {
    let (path, rest) = args.command.split_first().context("no command")?;
    let tty = args
        .tty
        .then(|| term::size().unwrap_or(protocol::TtySize { cols: 80, rows: 24 }));
    Ok(SpawnRequest {
        path: path.clone(),
        args: rest.to_vec(),
        env: args.env.clone(),
        dir: args.dir.clone(),
        user: args.user.clone(),
        stdin: args.stdin || args.tty,
        tty,
    })
}

/// The step image (`None`: it comes from `--image-from`, checked here) and the shim's delivery of
/// a cluster run: neither has a default, since no image exists in every cluster. `main` calls this
/// before connecting, so a missing or malformed one fails at once.
pub fn images(args: &RunArgs) -> Result<(Option<&str>, Delivery)> {
    let image = match (&args.image_from, args.image.as_deref()) {
        (Some(from), _) => {
            from.parse::<ImageFrom>()?.name()?;
            None
        }
        (None, Some(image)) => Some(image),
        (None, None) => bail!(
            "no step image: pass --image REF (or set STEPCTL_IMAGE) or --image-from POD:/PATH"
        ),
    };
    for v in image_volumes(args)? {
        v.from.name()?;
    }
    pod_options(args)?;
    let delivery = match args.delivery {
        DeliveryArg::Init => {
            let Some(shim) = &args.shim_image else {
                bail!(
                    "no shim image for --delivery init: pass --shim-image REF or set STEPCTL_SHIM_IMAGE \
                     (images/build-shim-image --push REPO prints one), or use --delivery configmap"
                );
            };
            Delivery::InitContainer {
                image: shim.clone(),
            }
        }
        DeliveryArg::Configmap => Delivery::ConfigMap {
            name: args.configmap.clone(),
        },
    };
    Ok((image, delivery))
}

/// Refuses pod options that exclude each other or cannot make a pod, in one line each.
fn pod_options(args: &RunArgs) -> Result<()> {
    if args.cpu.is_some() && args.cpu_request.is_some() {
        bail!("--cpu (request and limit) and --cpu-request (request only) exclude each other");
    }
    if args.cpu_request.as_deref() == Some("") || args.certs_configmap.as_deref() == Some("") {
        bail!("--cpu-request and --certs-configmap take a value");
    }
    if args.certs_configmap.is_some()
        && image_volumes(args)?
            .iter()
            .any(|v| v.mount_path == podspec::CERTS_DIR)
    {
        bail!(
            "--certs-configmap and --image-volume both mount at {}",
            podspec::CERTS_DIR
        );
    }
    if let Some(name) = args.name.as_deref().filter(|_| args.hermetic) {
        hermetic::check(name).map_err(|e| anyhow::anyhow!("--hermetic: {e}"))?;
    }
    Ok(())
}

/// The `--image-volume` arguments.
fn image_volumes(args: &RunArgs) -> Result<Vec<ImageVolume>> {
    let volumes = args
        .image_volume
        .iter()
        .map(|v| v.parse::<ImageVolume>())
        .collect::<Result<Vec<_>, _>>()?;
    for (i, v) in volumes.iter().enumerate() {
        if volumes[..i].iter().any(|w| w.mount_path == v.mount_path) {
            bail!("--image-volume: two images mounted at {}", v.mount_path);
        }
    }
    Ok(volumes)
}

/// The step pod `run` creates, named `name`, its image from `sources` if given there.
fn step_spec(args: &RunArgs, name: &str, sources: &StepImages) -> Result<StepSpec> {
    let (image, delivery) = images(args)?;
    let image = match (&sources.image, image) {
        (Some(s), _) => &s.reference,
        (None, Some(image)) => image,
        (None, None) => bail!("--image-from was not prepared"),
    };
    let mut step = StepSpec::new(name, image, delivery);
    step.build = args.build.clone();
    step.step = args.step.clone();
    step.cpu = args.cpu.clone();
    step.cpu_request = args.cpu_request.clone();
    step.hermetic = args.hermetic;
    step.certs_configmap = args.certs_configmap.clone();
    step.memory = args.memory.clone();
    step.privileged = args.privileged;
    step.image_pull_policy = args.pull_policy.clone();
    step.tls &= !args.no_tls;
    Ok(step)
}

/// The nodes of the pods the step reads (its inputs, its image, its image volumes), most read first:
/// where the scheduler should prefer to put it, so fewer bytes cross nodes.
fn near_data(rt: &Runtime, args: &RunArgs) -> Result<Vec<String>> {
    let mut pods: Vec<String> = Vec::new();
    for i in &args.inputs {
        pods.push(inputs::parse(i)?.pod().to_owned());
    }
    if let Some(from) = &args.image_from {
        pods.push(from.parse::<ImageFrom>()?.pod);
    }
    for v in &args.image_volume {
        pods.push(v.parse::<ImageVolume>()?.from.pod);
    }
    let mut count: Vec<(String, usize)> = Vec::new();
    for node in pods.iter().filter_map(|p| rt.node_of(p)) {
        match count.iter_mut().find(|(n, _)| *n == node) {
            Some((_, c)) => *c += 1,
            None => count.push((node, 1)),
        }
    }
    count.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(count.into_iter().map(|(n, _)| n).collect())
}

/// Creates the step pod, waits for it, `prepare`s its shim (inputs, output directories), runs
/// `spec` there, then deletes the pod unless it is to be kept.
async fn run_in_pod<F>(
    rt: &Runtime,
    args: &RunArgs,
    spec: &SpawnRequest,
    prepare: impl Fn(ShimClient) -> F,
) -> Result<i32>
where
    F: std::future::Future<Output = Result<()>>,
{
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("step-{}", random_suffix()));
    let from = args
        .image_from
        .as_deref()
        .map(str::parse::<ImageFrom>)
        .transpose()?;
    let ttl = Duration::from_secs(args.image_grant_ttl);
    let volumes = image_volumes(args)?;
    let sources =
        image_source::prepare_all(rt, from.as_ref(), &volumes, args.forwarder_port, ttl).await?;
    if let Some(s) = &sources.image {
        eprintln!("stepctl: image {} from {}", s.reference, s.from);
    }
    for (s, mount) in &sources.volumes {
        eprintln!("stepctl: image {} from {} at {mount}", s.reference, s.from);
    }
    let mut step = step_spec(args, &name, &sources)?;
    step.preferred_nodes = near_data(rt, args)?;
    if let Err(e) = image_source::create_pod(rt, &step, &sources).await {
        sources.revoke().await;
        return Err(anyhow::Error::new(e).context(format!("creating pod {name}")));
    }
    let result = async {
        let ip = rt
            .wait_ready(&name, Duration::from_secs(args.ready_timeout), |p| {
                eprintln!("stepctl: pod {name}: {p}")
            })
            .await?;
        let shim = rt.shim_via(&name, &ip).await?;
        prepare(shim.clone()).await?;
        let watch = node_watch(rt, &name, args.node_lost_after);
        say_disruption(rt, &name, run_process(&shim, &args.id, spec, Some(watch))).await
    }
    .await;
    if let Some(lost) = result
        .as_ref()
        .err()
        .and_then(|e| e.downcast_ref::<lost::NodeLost>())
    {
        // Nothing on a lost node ends gracefully: the pod goes now, its kubelet kills what is left.
        eprintln!("stepctl: {lost}; deleting pod {name} without grace");
        if let Err(e) = rt.delete_now(&name).await {
            eprintln!("stepctl: could not delete pod {name}: {e}");
        }
        sources.revoke().await;
        return result;
    }
    // The images are pulled (or will never be): their grants are done with. One the source shim no
    // longer answers expires by its ttl.
    sources.revoke().await;
    for out in &args.outputs {
        eprintln!("stepctl: output {name}:{out}");
    }
    if args.keep || !args.outputs.is_empty() {
        eprintln!("stepctl: keeping pod {name}");
    } else if let Err(e) = rt.delete(&name).await {
        eprintln!("stepctl: could not delete pod {name}: {e}");
    }
    result
}

/// What `run` and `attach` watch for a lost node: pod `name`'s node, `secs` of silence.
fn node_watch(rt: &Runtime, name: &str, secs: u64) -> lost::Watch {
    lost::Watch {
        pod: name.to_owned(),
        node: rt.node_of(name).unwrap_or_else(|| "(unknown)".into()),
        after: Duration::from_secs(secs),
    }
}

/// Spawns `spec` as `id` and follows it; Ctrl-C TERMs it, then KILLs it after a grace period. With
/// `watch`, a shim that stops answering ends it with [`lost::NodeLost`].
pub async fn run_process(
    shim: &ShimClient,
    id: &str,
    spec: &SpawnRequest,
    watch: Option<lost::Watch>,
) -> Result<i32> {
    shim.spawn(id, spec)
        .await
        .with_context(|| format!("starting {:?}", spec.path))?;
    follow(shim, id, 0, (spec.stdin, spec.tty.is_some()), watch).await
}

async fn follow(
    shim: &ShimClient,
    id: &str,
    offset: u64,
    (stdin, tty): (bool, bool),
    watch: Option<lost::Watch>,
) -> Result<i32> {
    let _raw = if tty {
        Some(term::RawMode::enter()?)
    } else {
        None
    };
    let input = stdin.then(|| tokio::spawn(term::pump_stdin(shim.clone(), id.to_owned())));
    let resizes = tty.then(|| tokio::spawn(term::follow_resizes(shim.clone(), id.to_owned())));
    let attach = term::stream(shim, id, offset);
    tokio::pin!(attach);
    let lost = async {
        match &watch {
            Some(w) => w.lost(shim).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(lost);
    let attached = tokio::select! {
        r = &mut attach => r,
        l = &mut lost => Err(anyhow::Error::new(l)),
        _ = tokio::signal::ctrl_c() => {
            eprintln!("stepctl: interrupted; sending TERM to {id}");
            let _ = shim.signal(id, "TERM").await;
            match tokio::time::timeout(INTERRUPT_GRACE, &mut attach).await {
                Ok(r) => r,
                Err(_) => {
                    eprintln!("stepctl: {id} still running after {INTERRUPT_GRACE:?}; sending KILL");
                    let _ = shim.signal(id, "KILL").await;
                    attach.await
                }
            }
        }
    };
    for task in [
        input.map(|t| t.abort_handle()),
        resizes.map(|t| t.abort_handle()),
    ]
    .into_iter()
    .flatten()
    {
        task.abort();
    }
    Ok(term::exit_code(&attached?.exit))
}

/// `stepctl attach POD ID`: the rest of a process's output, and its exit status.
pub async fn attach(target: &Target, args: AttachArgs) -> Result<i32> {
    let shim = target.shim(Some(&args.pod)).await?;
    match target {
        Target::Cluster(rt) => {
            let watch = node_watch(rt, &args.pod, args.node_lost_after);
            let follow = follow(&shim, &args.id, args.offset, (false, false), Some(watch));
            say_disruption(rt, &args.pod, follow).await
        }
        Target::Local(_) => follow(&shim, &args.id, args.offset, (false, false), None).await,
    }
}

/// Runs `follow`, saying once why if pod `name` is taken away meanwhile (evicted by a drain, the
/// taint manager or preemption, or deleted): its process then ends within its grace period, and
/// the follow with it.
async fn say_disruption(
    rt: &Runtime,
    name: &str,
    follow: impl Future<Output = Result<i32>>,
) -> Result<i32> {
    let notice = async {
        if let Some(why) = rt
            .disrupted(name, Duration::from_secs(10 * 365 * 86_400))
            .await
        {
            let node = rt.node_of(name).unwrap_or_else(|| "(unknown)".into());
            eprintln!("stepctl: pod {name} on node {node}: {why}");
        }
        std::future::pending::<()>().await
    };
    tokio::pin!(notice);
    tokio::pin!(follow);
    let result = tokio::select! {
        r = &mut follow => r,
        () = &mut notice => unreachable!("the notice never ends"),
    };
    // Killed by a signal: the pod's end may be why, and its notice a moment behind the exit.
    if matches!(result, Ok(code) if code >= 128) {
        tokio::select! {
            () = &mut notice => {}
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    result
}

/// `stepctl hijack POD`: an interactive terminal in a running pod.
pub async fn hijack(target: &Target, args: HijackArgs) -> Result<i32> {
    let shim = target.shim(args.pod.as_deref()).await?;
    let mut command = args.command.clone();
    if command.is_empty() {
        command = vec!["/bin/sh".into()];
    }
    let id = args
        .id
        .clone()
        .unwrap_or_else(|| format!("hijack-{}", random_suffix()));
    let spec = SpawnRequest {
        path: command[0].clone(),
        args: command[1..].to_vec(),
        env: vec![format!(
            "TERM={}",
            std::env::var("TERM").unwrap_or_else(|_| "xterm".into())
        )],
        stdin: true,
        tty: Some(term::size().unwrap_or(protocol::TtySize { cols: 80, rows: 24 })),
        ..Default::default()
    };
    let code = run_process(&shim, &id, &spec, None).await;
    // The hijacked shell is done; forget it so it does not linger in the shim.
    let _ = shim.delete(&id, true).await;
    code
}
