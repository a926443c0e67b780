"""`device`: a simulated edge device (ostree sysroot in a directory) and update scenarios."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from builder.commands.options import add_build_dir
from builder.context import Context
from builder.core.errors import InputError

SCENARIO_NAMES = ("good-update", "bad-update", "slow-update", "interrupted-pull", "lte-update",
                  "migrate")


def register(sub: Any) -> None:
    device = sub.add_parser("device", help="simulated edge device: install, upgrade over a "
                            "throttled link, boot with greenboot, update scenarios")
    actions = device.add_subparsers(dest="device_action", required=True, metavar="ACTION")

    init = actions.add_parser("init", help="create an empty ostree sysroot (the device's disk)")
    _sysroot(init, required=True)
    init.add_argument("--osname", default="edge", help="ostree OS name (default: edge)")
    init.set_defaults(func=cmd_init)

    install = actions.add_parser("install", help="factory imaging: deploy a commit")
    _sysroot(install, required=True)
    _source(install)
    install.add_argument("--ref", required=True, help="ref to install")
    install.add_argument("--commit", help="install this commit of the ref (default: its head)")
    install.add_argument("--trust", type=Path, metavar="KEY.asc",
                         help="public GPG key the device's remote verifies commits and update "
                              "indexes with (e.g. BUILD_DIR/gpg/SAMPLE-signing-key.asc)")
    install.add_argument("--wait-timeout", type=int, metavar="SECONDS",
                         help="MICROSHIFT_WAIT_TIMEOUT_SEC for the device's greenboot.conf")
    install.add_argument("--max-boot-attempts", type=int, metavar="N",
                         help="GREENBOOT_MAX_BOOT_ATTEMPTS for the device's greenboot.conf")
    install.set_defaults(func=cmd_install)

    upgrade = actions.add_parser(
        "upgrade", help="run the booted deployment's microshift-update (or ostree pull) "
                        "against the published repo over HTTP and stage the update")
    _sysroot(upgrade, required=True)
    _source(upgrade)
    _link(upgrade)
    _update_options(upgrade)
    upgrade.set_defaults(func=cmd_upgrade)

    boot = actions.add_parser("boot", help="boot once: grub, greenboot checks, green.d/red.d")
    _sysroot(boot, required=True)
    boot.add_argument("--health", default="healthy",
                      help="MicroShift model for the new (default) deployment: healthy, "
                           "api-never-ready, service-failed, crashloop:NS/NAME, slow:SECONDS")
    boot.add_argument("--until-settled", action="store_true",
                      help="boot again while greenboot reboots the device")
    boot.set_defaults(func=cmd_boot)

    status = actions.add_parser("status", help="deployments, grubenv and MicroShift backups")
    _sysroot(status, required=True)
    status.set_defaults(func=cmd_status)

    _add_simulate(actions.add_parser("simulate", help="run an update scenario end to end"))


def _add_simulate(simulate: argparse.ArgumentParser) -> None:
    add_build_dir(simulate)
    simulate.add_argument("--scenario", required=True, choices=SCENARIO_NAMES)
    simulate.add_argument("--work-dir", type=Path,
                          help="where the device and SAMPLE commits go "
                               "(default: BUILD_DIR/device-sim/SCENARIO)")
    simulate.add_argument("--ref", help="use the compose's commits on this ref in "
                          "BUILD_DIR/ostree/repo (head = v2, its parent = v1)")
    simulate.add_argument("--sample", action="store_true",
                          help="always use the simulation's own SAMPLE commits")
    simulate.add_argument("--wait-timeout", type=int, metavar="SECONDS",
                          help="base MICROSHIFT_WAIT_TIMEOUT_SEC on the device (default: 2 on "
                               "the simulated sysroot, 15 with --vm: a real boot under TCG)")
    simulate.add_argument("--payload-kib", type=int,
                          help="size of the file v2 changes in the SAMPLE commits (default: "
                               "256, 2048 for lte-update: long enough to cut and to time)")
    simulate.add_argument("--report-json", type=Path, help="write the outcome as JSON here")
    simulate.add_argument("--vm", action="store_true",
                          help="boot the pipeline's own disk image under QEMU instead of the "
                               "simulated sysroot (good-update, bad-update, lte-update; needs "
                               "root and a Debian mirror for the SAMPLE bootable base)")
    simulate.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                          help="--vm: QEMU's accelerator (auto: KVM when a KVM boot reaches "
                               "GRUB, else TCG)")
    simulate.add_argument("--time-limit", type=int, metavar="SECONDS",
                          help="--vm: stop the VM when the scenario has not settled after "
                               "this long (default: twice bad-update's boots under TCG: 1200 "
                               "for x86_64, 3600 for aarch64)")
    simulate.add_argument("--mirror", help="--vm: Debian mirror for the SAMPLE bootable base")
    simulate.add_argument("--firmware", choices=("uefi", "bios"), default="uefi",
                          help="--vm: boot a GPT disk through OVMF (uefi, the default) or an "
                               "MBR disk through SeaBIOS (bios)")
    simulate.add_argument("--secure-boot", action="store_true",
                          help="--vm, uefi: the commit's signed shim and GRUB on the disk, "
                               "OVMF enforcing Secure Boot with Microsoft's keys")
    simulate.add_argument("--mode", choices=("ostree", "image"), default="ostree",
                          help="--vm: an ostree device (the default) or an image-mode (bootc) "
                               "device installed from v1's bootc image, updated by image delta "
                               "and rolled back with bootc rollback")
    _link(simulate)
    simulate.set_defaults(func=cmd_simulate)


def _update_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", choices=("updater", "pull"), default="updater",
                        help="updater: the shipped microshift-update (signed index, delta "
                             "file, resumed download; default); pull: plain `ostree pull`")
    parser.add_argument("--interruptions", type=int, default=0, metavar="K",
                        help="cut the link K times at random points of the delta file")
    parser.add_argument("--seed", type=int, default=0,
                        help="where the cuts fall (default: 0, reproducible)")
    parser.add_argument("--max-bytes-per-second", type=int, default=0, metavar="N",
                        help="the updater's bandwidth cap, set in the device's update.yaml")
    parser.add_argument("--report", type=Path, metavar="FILE.json",
                        help="write method, bytes_on_wire, delta_bytes, interruptions and "
                             "seconds as JSON here")


def _sysroot(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--sysroot", type=Path, required=required,
                        help="the device directory (an ostree sysroot)")


def _source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True,
                        help="published ostree repo: a directory or an http(s):// URL "
                             "(`install` reads a directory as file://, as factory imaging "
                             "does; `upgrade` serves it over HTTP on 127.0.0.1)")


def _link(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", metavar="RATE",
                        help="throttle the pull through a veth link between two network "
                             "namespaces, e.g. 5mbit or 800kbit (needs root)")
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="per-request delay added by the server, modelling the link's "
                             "round trip (default: 0)")


def parse_rate(text: str | None) -> int | None:
    """'5mbit' -> 5000 (kbit/s)."""
    if text is None:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(kbit|mbit)", text.strip().lower())
    if not match or float(match.group(1)) <= 0:
        raise InputError("command line", "--rate", f"{text!r} is not a link rate",
                         hint="use e.g. 5mbit or 800kbit")
    return int(float(match.group(1)) * (1000 if match.group(2) == "mbit" else 1))


def _source_arg(text: str) -> Path | str:
    if text.startswith(("http://", "https://")):
        return text
    path = Path(text)
    if not (path / "config").is_file():
        raise InputError(text, "", "not an ostree repository (no config file)",
                         hint="give the published repo, e.g. BUILD_DIR/ostree/repo")
    return path


def _link_options(args: argparse.Namespace, rate: str | None = None) -> Any:
    """The link the options describe; `rate` stands for --rate when the scenario chose one."""
    from builder.device.sysroot import LinkOptions

    if args.latency_ms < 0:
        raise InputError("command line", "--latency-ms", "must not be negative")
    return LinkOptions(rate_kbit=parse_rate(rate or args.rate), latency=args.latency_ms / 1000)


def cmd_init(ctx: Context, args: argparse.Namespace) -> int:
    from builder.device.sysroot import Device

    Device(args.sysroot, ctx.runner, ctx.progress).init(args.osname)
    return 0


def cmd_install(ctx: Context, args: argparse.Namespace) -> int:
    from builder.device.sysroot import Device

    device = Device(args.sysroot, ctx.runner, ctx.progress)
    conf: dict[str, str] = {}
    if args.wait_timeout is not None:
        if not 1 <= args.wait_timeout <= 9999:
            raise InputError("command line", "--wait-timeout", "must be 1..9999 seconds")
        conf["MICROSHIFT_WAIT_TIMEOUT_SEC"] = str(args.wait_timeout)
    if args.max_boot_attempts is not None:
        if not 1 <= args.max_boot_attempts <= 9:
            raise InputError("command line", "--max-boot-attempts", "must be 1..9")
        conf["GREENBOOT_MAX_BOOT_ATTEMPTS"] = str(args.max_boot_attempts)
    with ctx.progress.step(f"device install {args.ref}"):
        if args.trust is not None and not args.trust.is_file():
            raise InputError("command line", "--trust", f"{args.trust} does not exist")
        deployment = device.install(_source_arg(args.repo), args.ref, args.commit,
                                    gpg_key=args.trust)
        if conf:
            device.write_greenboot_conf(deployment, conf)
    return 0


def cmd_upgrade(ctx: Context, args: argparse.Namespace) -> int:
    import json

    from builder.device.sysroot import Device
    from builder.device.updater_run import UpdateOptions, run_updater

    device = Device(args.sysroot, ctx.runner, ctx.progress)
    if args.interruptions < 0 or args.max_bytes_per_second < 0:
        raise InputError("command line", "--interruptions/--max-bytes-per-second",
                         "must not be negative")
    source = _source_arg(args.repo)
    with ctx.progress.step(f"device upgrade ({args.method})"):
        if args.method == "pull":
            transfer, _ = device.upgrade(source, _link_options(args))
            ctx.progress.info(f"transfer: {transfer.text()}; ostree: {transfer.ostree_summary}")
            document = {"method": "pull", "bytes_on_wire": transfer.body_bytes,
                        "delta_bytes": transfer.delta_bytes, "interruptions": 0,
                        "seconds": round(transfer.seconds, 3),
                        "wire_frame_bytes": transfer.wire_bytes}
        else:
            if not isinstance(source, Path):
                raise InputError("command line", "--repo",
                                 "the updater runs against a served directory",
                                 hint="give the published repo directory")
            options = UpdateOptions(_link_options(args), args.interruptions, args.seed,
                                    _sim_config(args.max_bytes_per_second))
            report, _ = run_updater(device, source, options)
            ctx.progress.info(f"transfer: {report.text()}")
            document = report.to_dict()
    if args.report:
        args.report.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return 0


def _lte_rate(ctx: Context, given: str | None) -> str | None:
    """lte-update: a 5 Mbit/s link unless --rate says otherwise (when namespaces can be made
    here)."""
    from builder.device.netlink import netns_unavailable_reason

    if given is not None:
        return given
    reason = netns_unavailable_reason(ctx.runner)
    if reason is None:
        return "5mbit"
    ctx.progress.warn(f"lte-update runs unthrottled: {reason}")
    return None


def _sim_config(cap: int) -> dict[str, object]:
    """update.yaml values for the simulation: resume at once after a cut (the device's
    default waits 30 s between attempts), and the bandwidth cap when one is asked for."""
    return {"retry_delay_seconds": 0, "timeout_seconds": 20, "max_bytes_per_second": cap}


def cmd_boot(ctx: Context, args: argparse.Namespace) -> int:
    from builder.device.boot import boot
    from builder.device.health_server import ApiServer, parse_health
    from builder.device.scenarios import boot_until_settled
    from builder.device.sysroot import Device

    device = Device(args.sysroot, ctx.runner, ctx.progress)
    device.config()
    health = parse_health(args.health)
    deployments = device.deployments()
    models = {deployments[0].checksum: health} if deployments else {}
    with ApiServer() as api, ctx.progress.step("device boot"):
        if args.until_settled:
            reports = boot_until_settled(device, api, models)
        else:
            reports = [boot(device, api, models)]
    return 0 if reports[-1].healthy else 1


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    from builder.device.sysroot import Device

    device = Device(args.sysroot, ctx.runner, ctx.progress)
    config = device.config()
    print(f"device {device.sysroot}: OS {config.osname}, ref {config.ref or '(none)'}")
    for deployment in device.deployments():
        role = "default" if deployment.index == 0 else "rollback"
        print(f"  {deployment.index} {role:8} {deployment.label()} {deployment.id}")
    print(f"  grubenv: {device.grubenv.read()}")
    backups = device.stateroot_var / "lib/microshift-backups"
    if backups.is_dir():
        for entry in sorted(backups.iterdir()):
            print(f"  backups: {entry.name}")
    return 0


def cmd_simulate(ctx: Context, args: argparse.Namespace) -> int:
    from builder.device.commits import build_sample_pair, find_update_pair
    from builder.device.scenarios import SCENARIOS, SimOptions, outcome_json, run_scenario

    if args.wait_timeout is not None and not 1 <= args.wait_timeout <= 9999:
        raise InputError("command line", "--wait-timeout", "must be 1..9999 seconds")
    if args.vm:
        return _simulate_vm(ctx, args)
    if args.scenario not in SCENARIOS:
        raise InputError("command line", "--scenario",
                         f"{args.scenario!r} runs in a VM only (add --vm); allowed without "
                         f"--vm: {', '.join(SCENARIOS)}")
    lte = args.scenario == "lte-update"
    payload_kib = args.payload_kib if args.payload_kib is not None else (2048 if lte else 256)
    if payload_kib < 0:
        raise InputError("command line", "--payload-kib", "must not be negative")
    work = (args.work_dir or ctx.layout.device_work(args.scenario)).resolve()
    link = _link_options(args, _lte_rate(ctx, args.rate) if lte else None)
    options = SimOptions(work_dir=work, wait_timeout=args.wait_timeout or 2, link=link)
    with ctx.progress.step(f"device simulate {args.scenario}: commits"):
        pair = None if args.sample else find_update_pair(ctx, args.ref)
        if pair is None:
            pair = build_sample_pair(ctx, work / "server/repo", payload_kib * 1024)
        ctx.progress.info(f"{pair.source} commits on {pair.ref}: v1 {pair.v1[:12]} -> "
                          f"v2 {pair.v2[:12]} in {pair.repo}")
    outcome = run_scenario(ctx, SCENARIOS[args.scenario], pair, options)
    if args.report_json:
        args.report_json.write_text(outcome_json(outcome) + "\n")
    verdict = "PASSED" if outcome.passed else "FAILED"
    print(f"scenario {args.scenario}: {verdict} "
          f"({sum(ok for _, ok in outcome.checks)}/{len(outcome.checks)} expectations)")
    return 0 if outcome.passed else 1


def _simulate_vm(ctx: Context, args: argparse.Namespace) -> int:
    from builder.vm.scenario_report import outcome_json, run_and_check
    from builder.vm.scenarios import VM_SCENARIOS, VmOptions

    if args.scenario not in VM_SCENARIOS:
        raise InputError("command line", "--scenario",
                         f"{args.scenario!r} has no VM form; allowed with "
                         f"--vm: {', '.join(VM_SCENARIOS)}")
    if args.time_limit is not None and args.time_limit < 60:
        raise InputError("command line", "--time-limit", "must be at least 60 seconds")
    if args.secure_boot and args.firmware != "uefi":
        raise InputError("command line", "--secure-boot", "is for --firmware uefi")
    run = _vm_context(ctx)
    if run.target_arch != "x86_64" and args.firmware != "uefi":
        raise InputError("command line", "--firmware",
                         f"an {run.target_arch} VM boots through UEFI only",
                         hint="drop --firmware bios")
    if args.scenario == "migrate" and args.mode == "image":
        raise InputError("command line", "--mode", "migrate starts on an ostree device and "
                         "switches it to the image itself", hint="drop --mode image")
    migrate = args.scenario == "migrate"
    for given, option in ((args.secure_boot, "--secure-boot"),
                          (args.mode == "image" or migrate, "--mode")):
        if given and run.target_arch != "x86_64":
            raise InputError("command line", option,
                             f"is for x86_64 VMs (OVMF's Microsoft keys, the SAMPLE amd64 "
                             f"images), not {run.target_arch}")
    work = (args.work_dir or ctx.layout.vm_work(args.scenario)).resolve()
    # The simulated sysroot's default wait (2 s) is far too short for a real boot under TCG.
    wait = args.wait_timeout or 15
    options = VmOptions(work=work, accel=args.accel, wait_timeout=wait,
                        time_limit=None if args.time_limit is None else float(args.time_limit),
                        mirror=args.mirror, firmware=args.firmware, secure_boot=args.secure_boot,
                        mode=args.mode)
    outcome = run_and_check(run, VM_SCENARIOS[args.scenario], options)
    if args.report_json:
        args.report_json.write_text(outcome_json(outcome) + "\n")
    verdict = "PASSED" if outcome.passed else "FAILED"
    firmware = outcome.firmware + (" with Secure Boot" if outcome.secure_boot else "")
    print(f"scenario {args.scenario} (VM, {outcome.mode} mode, {firmware}, {outcome.accel}): "
          f"{verdict} "
          f"({sum(ok for _, ok in outcome.checks)}/{len(outcome.checks)} expectations)")
    return 0 if outcome.passed else 1


def _vm_context(ctx: Context) -> Context:
    """The run for the VM's architecture (--arch, else the release's first). The scenario
    composes its own v1 and v2 of the release for that architecture alone, so one the release
    does not list is fine (the sample release lists x86_64 only): the VM's architecture is
    the device's, not what the release ships."""
    from dataclasses import replace

    from builder.release.model import load_release
    from builder.vm.qemu import BOARDS

    arch = ctx.arch or ctx.release.architectures[0]
    if arch not in BOARDS:
        raise InputError("command line", "--arch",
                         f"the VM scenarios boot {' or '.join(BOARDS)}; {arch} stays on the "
                         "simulated sysroot (drop --vm)")
    release = load_release(ctx.release_path)
    return replace(ctx, arch=arch, loaded=replace(release, architectures=(arch,)))
