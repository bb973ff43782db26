"""A deploy rehearsal, as far as a machine without an AWS account allows.

Usage:
    python infra/rehearse.py TEMPLATE SPEC_JSON [--localstack URL]

1. Translate the SAM template offline with the SAM translator (what `sam deploy` hands to
   CloudFormation) and check the generated CloudFormation: every SQS event source's visibility
   against its function's timeout, each function's environment (Globals merged, as SAM merges
   them) against the configuration parser's variables, the roles (no role SAM would add; each
   function runs with its own), and the runtime settings.
2. With --localstack: create through LocalStack's CloudFormation every resource of the generated
   template whose type LocalStack runs here (queues, the Object Lock bucket and its policy, log
   groups), with everything they depend on; then compare the stack's outputs and the created
   resources with the template's names and settings (what recon_harness::provision builds locally). What cannot be created here (DynamoDB through
   CloudFormation, Lambda, KMS, SNS, Scheduler targets, alarms on them) is listed, not faked.

SPEC_JSON is what `dlqctl infra-spec` prints. Exit 1 with every difference.
"""

import copy
import json
import os
import sys
import time

from cfnlint.decode import decode

# The resource types LocalStack runs here (SERVICES in infra/local/stack.sh) through CloudFormation.
CREATABLE = {
    "AWS::SQS::Queue",
    "AWS::SQS::QueuePolicy",
    "AWS::S3::Bucket",
    "AWS::S3::BucketPolicy",
    "AWS::Logs::LogGroup",
}


class NoManagedPolicies:
    """The functions name their own roles, so the translator looks up no managed policy."""

    def load(self):
        return {}


def translate(path):
    from samtranslator.translator.transform import transform

    sam, matches = decode(path)
    if sam is None:
        raise SystemExit(f"cannot read {path}: {matches}")
    sam = json.loads(json.dumps(sam))
    for r in sam.get("Resources", {}).values():
        if r.get("Type") == "AWS::Serverless::Function":
            # `sam build` replaces the local path by the uploaded artifact.
            r["Properties"]["CodeUri"] = "s3://rehearsal-artifacts/function.zip"
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    return transform(sam, {}, NoManagedPolicies())


def logical(value):
    """The logical id a Ref or GetAtt names, or None."""
    if isinstance(value, dict):
        if "Ref" in value:
            return value["Ref"]
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            return target[0] if isinstance(target, list) else target.split(".")[0]
    return None


def references(node):
    """Every logical id or parameter a piece of template refers to."""
    found = set()
    if isinstance(node, dict):
        name = logical(node)
        if name:
            found.add(name)
        sub = node.get("Fn::Sub")
        if sub is not None:
            text = sub if isinstance(sub, str) else sub[0]
            rest = text
            while "${" in rest:
                start = rest.index("${") + 2
                end = rest.index("}", start)
                found.add(rest[start:end].split(".")[0])
                rest = rest[end + 1:]
            if isinstance(sub, list) and len(sub) > 1:
                found |= references(sub[1])
        for v in node.values():
            found |= references(v)
    elif isinstance(node, list):
        for v in node:
            found |= references(v)
    return found


def check_generated(cfn, spec):
    errors = []
    res = cfn.get("Resources", {})
    functions = {k: r for k, r in res.items() if r["Type"] == "AWS::Lambda::Function"}
    if sorted(functions) != sorted(spec["function_env"]):
        errors.append(f"functions generated: {sorted(functions)}, the code runs {sorted(spec['function_env'])}")
    known = set(spec["variables"])
    for name, f in sorted(functions.items()):
        props = f["Properties"]
        env = props.get("Environment", {}).get("Variables", {})
        for var in sorted(spec["function_env"].get(name, [])):
            if var not in env:
                errors.append(f"generated {name} lacks {var}, which its code needs")
        for var in sorted(v for v in env if v.startswith("DLQ_") and v not in known):
            errors.append(f"generated {name} sets {var}, which no function reads")
        if props.get("Runtime") != "provided.al2023" or props.get("Handler") != "bootstrap" or props.get("Architectures") != ["arm64"]:
            errors.append(f"generated {name}: runtime {props.get('Runtime')}, handler {props.get('Handler')}, {props.get('Architectures')}")
        # The functions that reach the ledger run in your subnets exactly when it is PostgreSQL.
        vpc = props.get("VpcConfig")
        reaches_ledger = env.get("DLQ_LEDGER") == {"Ref": "LedgerKind"}
        in_subnets_for_postgres = isinstance(vpc, dict) and (vpc.get("Fn::If") or [None])[0] == "UsePostgres"
        if reaches_ledger != in_subnets_for_postgres or (vpc is not None and not in_subnets_for_postgres):
            errors.append(f"generated {name}: VpcConfig {vpc!r} (it reaches the ledger: {reaches_ledger})")
        role = logical(props.get("Role"))
        if role is None or res.get(role, {}).get("Type") != "AWS::IAM::Role":
            errors.append(f"generated {name} runs with {props.get('Role')!r}, not a role of the template")
    # The roles Lambda may assume are exactly the functions' (the operators' roles trust people).
    lambda_roles = {k for k, r in res.items() if r["Type"] == "AWS::IAM::Role"
                    and any(st.get("Principal", {}).get("Service") == "lambda.amazonaws.com"
                            for st in r["Properties"]["AssumeRolePolicyDocument"]["Statement"])}
    runs = {logical(f["Properties"].get("Role")) for f in res.values() if f["Type"] == "AWS::Lambda::Function"}
    if lambda_roles != runs:
        errors.append(f"roles Lambda may assume: {sorted(lambda_roles)}; the functions run with {sorted(runs)}")
    # Every route of the control plane's API is IAM-authorized: the caller is who AWS verified.
    for name, api in sorted(res.items()):
        if api["Type"] != "AWS::ApiGatewayV2::Api":
            continue
        for path, methods in sorted(api["Properties"].get("Body", {}).get("paths", {}).items()):
            for method, op in sorted(methods.items()):
                if op.get("security") != [{"AWS_IAM": []}]:
                    errors.append(f"generated {name} {method.upper()} {path}: security {op.get('security')!r}, not AWS_IAM")
    for name, m in sorted(res.items()):
        if m["Type"] != "AWS::Lambda::EventSourceMapping":
            continue
        queue = res.get(logical(m["Properties"].get("EventSourceArn")) or "", {})
        function = res.get(logical(m["Properties"].get("FunctionName")) or "", {})
        if queue.get("Type") == "AWS::SQS::Queue":
            visibility = queue["Properties"].get("VisibilityTimeout", 30)
            timeout = function.get("Properties", {}).get("Timeout", 3)
            if visibility < 6 * timeout:
                errors.append(f"generated {name}: queue visibility {visibility} s < 6 x function timeout {timeout} s")
    return errors


def decided_conditions(cfn, defaults):
    """Each condition's value under the parameters' `defaults`, where the template alone decides
    it (Equals of a parameter and a literal, Not, And, Or, another condition); None otherwise."""
    conds = cfn.get("Conditions", {})

    def value(node):
        if isinstance(node, dict) and "Ref" in node:
            return defaults.get(node["Ref"])
        return node if isinstance(node, (str, int, float, bool)) else None

    def evaluate(node, seen=()):
        if not isinstance(node, dict) or len(node) != 1:
            return None
        (fn, arg), = node.items()
        if fn == "Condition":
            return None if arg in seen else evaluate(conds.get(arg), seen + (arg,))
        if fn == "Fn::Equals":
            a, b = (value(x) for x in arg)
            return None if a is None or b is None else str(a) == str(b)
        parts = [evaluate(x, seen) for x in arg]
        if None in parts:
            return None
        return {"Fn::Not": lambda: not parts[0], "Fn::And": lambda: all(parts), "Fn::Or": lambda: any(parts)}.get(fn, lambda: None)()

    return {name: evaluate(c) for name, c in conds.items()}


def pruned(node, decided):
    """`node` with each Fn::If whose condition is decided replaced by its branch (AWS::NoValue
    dropped): what CloudFormation resolves, so a reference in a branch not taken needs nothing."""
    if isinstance(node, dict):
        if "Fn::If" in node and decided.get(node["Fn::If"][0]) is not None:
            return pruned(node["Fn::If"][1 if decided[node["Fn::If"][0]] else 2], decided)
        out = {}
        for k, v in node.items():
            v = pruned(v, decided)
            if v != {"Ref": "AWS::NoValue"}:
                out[k] = v
        return out
    if isinstance(node, list):
        return [x for x in (pruned(v, decided) for v in node) if x != {"Ref": "AWS::NoValue"}]
    return node


def creatable_part(cfn, prefix, fifo=False):
    """The resources LocalStack can create here, with everything they need; and what is left out."""
    defaults = {k: p.get("Default") for k, p in cfn.get("Parameters", {}).items()}
    # LocalStack here runs no KMS through CloudFormation: the stores on their services' keys, as
    # the local stack is (the stores' key is checked by the template check and evaluated offline).
    defaults.update({"StackPrefix": prefix, "FifoQueues": "true" if fifo else "false", "CustomerManagedKeys": "false"})
    decided = decided_conditions(cfn, defaults)
    res = {k: pruned(r, decided) for k, r in cfn["Resources"].items()}
    keep = {k for k, r in res.items() if r["Type"] in CREATABLE}
    params = set(cfn.get("Parameters", {}))
    changed = True
    while changed:
        changed = False
        for k in sorted(keep):
            needs = references(res[k].get("Properties", {})) | set(
                res[k].get("DependsOn", []) if isinstance(res[k].get("DependsOn"), list) else [res[k].get("DependsOn")] if res[k].get("DependsOn") else []
            )
            missing = {n for n in needs if n not in keep and n not in params and not n.startswith("AWS::")}
            if missing:
                keep.discard(k)
                changed = True
    outputs = {k: o for k, o in cfn.get("Outputs", {}).items()
               if all(n in keep or n in params or n.startswith("AWS::") for n in references(o.get("Value")))}
    part = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Parameters": copy.deepcopy(cfn.get("Parameters", {})),
        "Conditions": copy.deepcopy(cfn.get("Conditions", {})),
        "Resources": {k: res[k] for k in sorted(keep)},
        "Outputs": outputs,
    }
    part["Parameters"]["StackPrefix"]["Default"] = prefix
    part["Parameters"]["FifoQueues"]["Default"] = "true" if fifo else "false"
    part["Parameters"]["CustomerManagedKeys"]["Default"] = "false"
    left = sorted(f"{k} ({r['Type']})" for k, r in res.items() if k not in keep)
    return part, left, sorted(set(cfn.get("Outputs", {})) - set(outputs))


def rehearse_on_localstack(cfn, spec, url, fifo=False):
    import boto3

    session = dict(endpoint_url=url, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    cf = boto3.client("cloudformation", **session)
    sqs = boto3.client("sqs", **session)
    s3 = boto3.client("s3", **session)
    account = boto3.client("sts", **session).get_caller_identity()["Account"]
    prefix = f"rh{os.getpid() % 100000}{'f' if fifo else ''}"
    part, left, outputs_left = creatable_part(cfn, prefix, fifo)
    name = f"{prefix}-rehearsal"
    cf.create_stack(StackName=name, TemplateBody=json.dumps(part))
    status = "CREATE_IN_PROGRESS"
    for _ in range(240):
        stack = cf.describe_stacks(StackName=name)["Stacks"][0]
        status = stack["StackStatus"]
        if status != "CREATE_IN_PROGRESS":
            break
        time.sleep(0.5)
    errors = []
    if status != "CREATE_COMPLETE":
        events = cf.describe_stack_events(StackName=name)["StackEvents"]
        reasons = [f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason')}" for e in events if "FAILED" in e["ResourceStatus"]]
        return [f"LocalStack could not create the rehearsal stack ({status}): {reasons}"], part, left, outputs_left
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}

    def resolved(value):
        """A name or number as the template gives it here (FifoQueues chosen, defaults otherwise)."""
        if isinstance(value, dict) and "Fn::If" in value:
            condition, yes, no = value["Fn::If"]
            if condition != "UseFifo":
                raise SystemExit(f"the rehearsal resolves only UseFifo, not {condition}")
            return resolved(yes if fifo else no)
        if isinstance(value, dict) and "Fn::Sub" in value:
            return value["Fn::Sub"].replace("${StackPrefix}", prefix).replace("${AWS::AccountId}", account).replace("${AWS::Region}", "us-east-1")
        if isinstance(value, dict) and "Ref" in value:
            return cfn["Parameters"][value["Ref"]].get("Default")
        return value

    res = cfn["Resources"]
    if outputs.get("StackPrefix") != prefix or outputs.get("QuarantineBucketOwner") != account:
        errors.append(f"outputs StackPrefix {outputs.get('StackPrefix')!r}, QuarantineBucketOwner {outputs.get('QuarantineBucketOwner')!r}")
    # The created resources are the template's, as recon_harness::provision builds them locally.
    for key, queue_id in (("MainQueueUrl", "MainQueue"), ("DeadLetterQueueUrl", "DeadLetterQueue")):
        props = res[queue_id]["Properties"]
        url_out = outputs.get(key, "")
        want = resolved(props["QueueName"])
        if not url_out.endswith("/" + want):
            errors.append(f"output {key} is {url_out!r}; the template names the queue {want!r}")
            continue
        attrs = sqs.get_queue_attributes(QueueUrl=url_out, AttributeNames=["All"])["Attributes"]
        if (attrs.get("FifoQueue") == "true") != fifo:
            errors.append(f"created {want}: FifoQueue {attrs.get('FifoQueue')}, the parameter says {fifo}")
        for attr in ("VisibilityTimeout", "MessageRetentionPeriod", "MaximumMessageSize"):
            if int(attrs.get(attr, -1)) != resolved(props[attr]):
                errors.append(f"created {want}: {attr} {attrs.get(attr)}, the template says {props[attr]}")
        if "RedrivePolicy" in props:
            redrive = json.loads(attrs.get("RedrivePolicy", "{}"))
            if int(redrive.get("maxReceiveCount", -1)) != resolved(props["RedrivePolicy"]["maxReceiveCount"]):
                errors.append(f"created {want}: maxReceiveCount {redrive.get('maxReceiveCount')}")
            target = res[logical(props["RedrivePolicy"]["deadLetterTargetArn"])]["Properties"]["QueueName"]
            if not str(redrive.get("deadLetterTargetArn", "")).endswith(":" + resolved(target)):
                errors.append(f"created {want} redrives to {redrive.get('deadLetterTargetArn')}")
    bucket = outputs.get("QuarantineBucket")
    declared = res["QuarantineBucket"]["Properties"]
    if bucket != resolved(declared["BucketName"]):
        errors.append(f"output QuarantineBucket is {bucket!r}; the template names it {resolved(declared['BucketName'])!r}")
    if bucket:
        lock = s3.get_object_lock_configuration(Bucket=bucket, ExpectedBucketOwner=account)["ObjectLockConfiguration"]
        retention = lock.get("Rule", {}).get("DefaultRetention", {})
        wanted = declared["ObjectLockConfiguration"]["Rule"]["DefaultRetention"]
        if retention.get("Mode") != wanted["Mode"] or retention.get("Days") != int(resolved(wanted["Days"])):
            errors.append(f"created bucket {bucket}: Object Lock {retention}, the template says {wanted}")
        if s3.get_bucket_versioning(Bucket=bucket).get("Status") != "Enabled":
            errors.append(f"created bucket {bucket} is not versioned")
    cf.delete_stack(StackName=name)
    return errors, part, left, outputs_left


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[2]) as f:
        spec = json.load(f)
    cfn = translate(sys.argv[1])
    os.makedirs(".local-aws/rehearsal", exist_ok=True)
    with open(".local-aws/rehearsal/generated.json", "w") as f:
        json.dump(cfn, f, indent=1, sort_keys=True)
    errors = check_generated(cfn, spec)
    print(f"rehearsal: SAM translated {len(cfn['Resources'])} CloudFormation resources offline (.local-aws/rehearsal/generated.json)")
    if "--localstack" in sys.argv:
        url = sys.argv[sys.argv.index("--localstack") + 1]
        more, part, left, outputs_left = rehearse_on_localstack(cfn, spec, url)
        errors += more
        fifo_errors, _, _, _ = rehearse_on_localstack(cfn, spec, url, fifo=True)
        errors += [f"with FifoQueues=true: {e}" for e in fifo_errors]
        print(f"rehearsal: LocalStack's CloudFormation created {len(part['Resources'])} of them, with standard and with FIFO queues "
              f"({', '.join(sorted(part['Resources']))}) and {len(part['Outputs'])} outputs")
        print(f"rehearsal: not created here (no such service in this LocalStack, or depending on one): {len(left)} resources, "
              f"outputs {', '.join(outputs_left)}")
    if errors:
        print("the deploy rehearsal found differences:")
        for e in errors:
            print(f"  - {e}")
        return 1
    print("rehearsal: the generated template agrees with the code, the created resources with the template")
    return 0


if __name__ == "__main__":
    sys.exit(main())
