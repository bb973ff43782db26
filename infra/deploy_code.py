"""The fast path: new code for the four functions of an existing stack, with cargo lambda deploy.

The SAM stack owns every resource; this only replaces each function's code, keeping the role,
environment, timeout, memory and tracing the stack gave it (names from the stack's outputs; the
timeout, the memory size and tracing from the template: never guessed). It refuses when a deployed function lacks
a variable the new code requires, or has another memory size than the code's: those change with
the template (make deploy), not with the code. Run `make build` first (cargo lambda build
--arm64, optimised for size).

Usage:
    python infra/deploy_code.py TEMPLATE SPEC_JSON STACK [--dry | --plan]
        --plan  print the cargo lambda commands and run nothing
        --dry   run cargo lambda deploy --dry (cargo lambda checks the build and prints the plan)
    python infra/deploy_code.py TEMPLATE SPEC_JSON --self-test URL
        read a LocalStack CloudFormation stack with the template's outputs and check the plan

SPEC_JSON is what `dlqctl infra-spec` prints. The standard AWS environment applies.
"""

import json
import os
import subprocess
import sys
import time

from cfnlint.decode import decode


def stack_outputs(stack, endpoint=None):
    import boto3

    kw = {"endpoint_url": endpoint} if endpoint else {}
    out = boto3.client("cloudformation", **kw).describe_stacks(StackName=stack)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in out.get("Outputs", [])}


def read_template(template_path):
    tpl, matches = decode(template_path)
    if tpl is None:
        raise SystemExit(f"cannot read {template_path}: {matches}")
    return tpl


def sizing(tpl, f):
    """A function's timeout and memory size, as the template sets them (Globals as the fallback)."""
    props = tpl["Resources"][f["logical_id"]]["Properties"]
    shared = tpl.get("Globals", {}).get("Function", {})
    return props.get("Timeout", shared.get("Timeout")), props.get("MemorySize", shared.get("MemorySize"))


def plan(template_path, spec, outputs, mode):
    """The cargo lambda deploy command of each function, or the outputs the stack lacks."""
    tpl = read_template(template_path)
    tracing = str(tpl["Globals"]["Function"].get("Tracing", "PassThrough")).lower()
    commands, missing = [], []
    for f in spec["functions"]:
        name, role = outputs.get(f["function_output"]), outputs.get(f["role_output"])
        if not name or not role:
            missing += [o for o in (f["function_output"], f["role_output"]) if not outputs.get(o)]
            continue
        timeout, memory = sizing(tpl, f)
        command = [
            "cargo", "lambda", "deploy",
            "--binary-name", f["binary"],
            "--role", role,
            "--timeout", str(timeout),
            "--memory", str(memory),
            "--tracing", tracing,
            "--runtime", "provided.al2023",
            # Keep the stack's environment: add nothing, replace nothing.
            "--merge-env",
        ]
        if mode == "--dry":
            command.append("--dry")
        commands.append(command + [name])
    return commands, missing


def configuration_gaps(tpl, spec, outputs):
    """What the template gives the new code that a deployed function does not have: a variable
    it requires (deploying would leave it unable to start) or its memory size (deploying would
    change it behind CloudFormation's back). make deploy sets both."""
    import boto3

    lam = boto3.client("lambda")
    gaps = []
    for f in spec["functions"]:
        name = outputs.get(f["function_output"])
        if not name:
            continue
        config = lam.get_function_configuration(FunctionName=name)
        env = config.get("Environment", {}).get("Variables", {})
        missing = sorted(v for v in spec["function_env"].get(f["logical_id"], {}) if v not in env)
        if missing:
            gaps.append(f"{name} lacks {', '.join(missing)}")
        memory = sizing(tpl, f)[1]
        if config.get("MemorySize") != memory:
            gaps.append(f"{name} has {config.get('MemorySize')} MB, the template {memory}")
    return gaps


def self_test(template_path, spec, url):
    """Read a LocalStack stack carrying the template's function and role outputs; check the plan."""
    import boto3

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    cf = boto3.client("cloudformation", endpoint_url=url)
    name = f"deploy-code-{os.getpid()}"
    values = {}
    for f in spec["functions"]:
        values[f["function_output"]] = f"{name}-{f['binary']}"
        values[f["role_output"]] = f"arn:aws:iam::000000000000:role/{name}-{f['binary']}"
    template = {
        "Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {k: {"Value": v} for k, v in values.items()},
    }
    cf.create_stack(StackName=name, TemplateBody=json.dumps(template))
    for _ in range(120):
        if cf.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"] != "CREATE_IN_PROGRESS":
            break
        time.sleep(0.25)
    commands, missing = plan(template_path, spec, stack_outputs(name, url), "--plan")
    cf.delete_stack(StackName=name)
    errors = [f"output {m} not read" for m in missing]
    if len(commands) != len(spec["functions"]):
        errors.append(f"{len(commands)} commands for {len(spec['functions'])} functions")
    for c, f in zip(commands, spec["functions"]):
        if c[-1] != values[f["function_output"]] or c[c.index("--role") + 1] != values[f["role_output"]]:
            errors.append(f"{f['binary']}: {' '.join(c)}")
        if (
            c[c.index("--binary-name") + 1] != f["binary"]
            or [c[c.index("--timeout") + 1], c[c.index("--memory") + 1]] != [str(v) for v in sizing(read_template(template_path), f)]
        ):
            errors.append(f"{f['binary']}: {' '.join(c)}")
    if errors:
        print("deploy-code self-test failed:\n  - " + "\n  - ".join(errors))
        return 1
    print(f"deploy-code: the plan for {len(commands)} functions reads every name and role from the stack's outputs")
    return 0


def main():
    args = sys.argv[1:]
    if len(args) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(args[1]) as f:
        spec = json.load(f)
    if args[2] == "--self-test":
        return self_test(args[0], spec, args[3])
    mode = args[3] if len(args) > 3 else None
    outputs = stack_outputs(args[2])
    commands, missing = plan(args[0], spec, outputs, mode)
    if missing:
        print(f"stack {args[2]} lacks the outputs {', '.join(missing)}: deploy this version's template (make deploy) first",
              file=sys.stderr)
        return 1
    gaps = configuration_gaps(read_template(args[0]), spec, outputs)
    if gaps:
        print("this version's template configures the functions otherwise than the stack does (" + "; ".join(gaps)
              + "): deploy this version's template (make deploy), not just its code", file=sys.stderr)
        return 1
    for c in commands:
        print("+ " + " ".join(c))
        if mode != "--plan":
            subprocess.run(c, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
