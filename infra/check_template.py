"""Check infra/template.yaml where neither AWS nor the local stack would: rules between its resources,
alarms, the dashboard and the ledger conditions.

Usage:
    python infra/check_template.py TEMPLATE SPEC_JSON           # exit 1 and list every difference
    python infra/check_template.py TEMPLATE SPEC_JSON --self-test  # prove the check can fail

SPEC_JSON is what `dlqctl infra-spec` prints. The template is the one definition of a deployment:
the local stack is built from it (recon_harness::provision), so a key, an index or a queue setting the
code needs fails the integration tests by use, and the code's side of it (each function's
variables, the outputs dlqctl --stack reads, timeouts, defaults) is checked in Rust on the
resolved template (shared/harness/src/template/contract.rs). Checked here: the queues kept on
deletion and FIFO together, the rules between resources (visibility against timeouts, retention
of a DLQ against its source, age alarms before expiry), alarms, the dashboard and metrics, the
tables' and the bucket's protection, the outputs make deploy-code reads, the ledger conditions,
and that no role attaches a managed policy. Each role's grants are held to what its function's
code calls on the local stack (tests/iam.rs), resource by resource.
"""

import copy
import json
import sys

from cfnlint.decode import decode


def sub_text(value):
    """The text of a !Sub, or None."""
    if isinstance(value, dict) and isinstance(value.get("Fn::Sub"), str):
        return value["Fn::Sub"]
    return None


def resource_ref(value):
    """The logical id a Ref, GetAtt or "${Id.Arn}..." Sub names (with the Sub's rest), or its JSON."""
    if isinstance(value, dict):
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            return target[0] if isinstance(target, list) else target.split(".")[0]
        if "Ref" in value:
            return value["Ref"]
        if "Fn::Sub" in value and isinstance(value["Fn::Sub"], str):
            text = value["Fn::Sub"]
            if text.startswith("${") and ".Arn}" in text:
                logical = text[2:text.index(".Arn}")]
                return logical + text[text.index(".Arn}") + len(".Arn}"):]
    return json.dumps(value, sort_keys=True)


def check(tpl, spec):
    errors = []
    res = tpl.get("Resources", {})

    def expect(what, actual, wanted):
        if actual != wanted:
            errors.append(f"{what}: template has {actual!r}, the code says {wanted!r}")

    mq = res.get("MainQueue", {}).get("Properties", {})
    dq = res.get("DeadLetterQueue", {}).get("Properties", {})
    fifo = {"Fn::If": ["UseFifo", True, {"Ref": "AWS::NoValue"}]}
    pq = res.get("ParkingQueue", {}).get("Properties", {})
    for logical, q in (("MainQueue", mq), ("DeadLetterQueue", dq), ("ParkingQueue", pq)):
        r = res.get(logical, {})
        expect(f"{logical} kept on replacement and deletion (it may hold transactions)",
               (r.get("DeletionPolicy"), r.get("UpdateReplacePolicy")), ("Retain", "Retain"))
        # Both FIFO or neither (a FIFO queue's DLQ must be FIFO), named .fifo exactly then.
        expect(f"{logical} FifoQueue (FIFO exactly when FifoQueues is true)", q.get("FifoQueue"), fifo)
        name = q.get("QueueName")
        branches = name.get("Fn::If") if isinstance(name, dict) else None
        fifo_name, standard_name = (sub_text(b) or "" for b in (branches or [None, None, None])[1:])
        if not (branches and branches[0] == "UseFifo" and fifo_name.endswith(".fifo") and not standard_name.endswith(".fifo")):
            errors.append(f"{logical} QueueName {name!r}: a queue's name ends in .fifo exactly when it is FIFO")
    redrive = mq.get("RedrivePolicy", {})
    expect("redrive target", resource_ref(redrive.get("deadLetterTargetArn")), "DeadLetterQueue")
    # A dead letter the enricher keeps failing on is parked, never left to expire in the DLQ.
    expect("the DLQ's redrive target", resource_ref(dq.get("RedrivePolicy", {}).get("deadLetterTargetArn")), "ParkingQueue")
    env = res.get("ConsumerFunction", {}).get("Properties", {}).get("Environment", {}).get("Variables", {})
    expect("consumer DLQ_MAX_ATTEMPTS is the redrive parameter", env.get("DLQ_MAX_ATTEMPTS"), redrive.get("maxReceiveCount"))
    errors.extend(cross_resource_rules(tpl))
    errors.extend(failures_page_a_human(tpl))
    errors.extend(nothing_expires_silently(tpl))
    # Reserved concurrency fits what runs at once: the consumer as many as its event source may
    # start, the replay the sweep, the seal, a manual run and one reconcile --fan-out invocation.
    params = tpl.get("Parameters", {})
    default = lambda name: params.get(name, {}).get("Default", 0)
    if default("ConsumerReservedConcurrency") < default("ConsumerMaxConcurrency"):
        errors.append("ConsumerReservedConcurrency is below ConsumerMaxConcurrency: the event source would be throttled")
    if default("ReplayReservedConcurrency") < 4:
        errors.append("ReplayReservedConcurrency below 4: the sweep, the seal, a manual run and a fan-out invocation would throttle each other")
    # No deployment whose alarms page no one, unless its deployer says so.
    rule = tpl.get("Rules", {}).get("AlarmsReachSomeone", {})
    expect("the rule that refuses a deployment without AlarmEmail",
           (rule.get("RuleCondition"), [a.get("Assert") for a in rule.get("Assertions", [])]),
           ({"Fn::Equals": [{"Ref": "AlarmEmail"}, ""]}, [{"Fn::Equals": [{"Ref": "AlarmsUnattended"}, "true"]}]))
    errors.extend(alarms_can_publish(tpl))
    errors.extend(tampering_pages(tpl))
    errors.extend(credential_refusals_page(tpl, spec["credential_refused_alarm"]))
    errors.extend(copies_outlive_the_stores(tpl))
    errors.extend(stores_use_the_data_key(tpl))
    errors.extend(every_alarm_on_the_dashboard(tpl))
    errors.extend(own_metrics_per_stack(tpl, spec["metrics_namespace"]))

    # The tables' keys and indexes are the code's by use: the local stack is built from this
    # template (recon_harness::provision), so a key or an index the code needs and the template lacks
    # fails the integration tests. What the local stack cannot build is checked here.
    for name, r in sorted(res.items()):
        if r.get("Type") != "AWS::DynamoDB::Table":
            continue
        props = r.get("Properties", {})
        expect(f"{name} kept on replacement and deletion", (r.get("DeletionPolicy"), r.get("UpdateReplacePolicy")), ("Retain", "Retain"))
        expect(f"{name} billing", props.get("BillingMode"), "PAY_PER_REQUEST")
        expect(f"{name} point-in-time recovery", props.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled"), True)
        expect(f"{name} deletion protection", props.get("DeletionProtectionEnabled"), True)
        expect(f"{name} encryption", props.get("SSESpecification", {}).get("SSEEnabled"), True)

    bucket = res.get("QuarantineBucket", {}).get("Properties", {})
    retention = bucket.get("ObjectLockConfiguration", {}).get("Rule", {}).get("DefaultRetention", {})
    expect("bucket ObjectLockEnabled", bucket.get("ObjectLockEnabled"), True)
    expect("Object Lock mode", retention.get("Mode"), "COMPLIANCE")
    expect("bucket versioning", bucket.get("VersioningConfiguration", {}).get("Status"), "Enabled")

    # Seven years after the end of the fiscal year a record was made in (up to eight from the
    # record), never less than seven; every put held to it by the bucket policy.
    worm = tpl.get("Parameters", {}).get("WormRetentionDays", {})
    if worm.get("Default", 0) < 2922 or worm.get("MinValue", 0) < 2557:
        errors.append(f"WormRetentionDays default {worm.get('Default')} / minimum {worm.get('MinValue')}: at least 2922 / 2557 days")
    policy = res.get("QuarantineBucketPolicy", {}).get("Properties", {}).get("PolicyDocument", {}).get("Statement", [])
    denied_puts = [st.get("Condition") for st in policy if st.get("Effect") == "Deny" and st.get("Action") == "s3:PutObject" and st.get("Principal") == "*"]
    for wanted, what in [
        ({"StringNotEquals": {"s3:object-lock-mode": "COMPLIANCE"}}, "a put without its own COMPLIANCE retention"),
        ({"NumericLessThan": {"s3:object-lock-remaining-retention-days": {"Ref": "WormRetentionDays"}}}, "a put retained less than WormRetentionDays"),
    ]:
        if wanted not in denied_puts:
            errors.append(f"the bucket policy does not refuse {what}")

    outputs = tpl.get("Outputs", {})
    for f in spec["functions"]:
        props = res.get(f["logical_id"], {}).get("Properties", {})
        # make deploy-code keeps each function's memory size: the template states it.
        if "MemorySize" not in props:
            errors.append(f"{f['logical_id']} has no MemorySize of its own (make deploy-code reads it)")
        level = props.get("LoggingConfig", {}).get("ApplicationLogLevel")
        if level != {"Ref": "LogLevel"}:
            errors.append(f"{f['logical_id']}'s application log level is {level!r}, not the LogLevel parameter")
        for name, value in sorted(f["outputs"].items()):
            actual = outputs.get(name, {}).get("Value")
            if actual != value:
                errors.append(f"output {name} is {actual!r}; make deploy-code reads it as {value!r}")
    conditions = tpl.get("Conditions", {})
    for name, kind in sorted(spec["ledger_conditions"].items()):
        expect(f"condition {name}", conditions.get(name), {"Fn::Equals": [{"Ref": "LedgerKind"}, kind]})
    for name, kind_condition, param in [("HasPostgresSecret", "UsePostgres", "PostgresSecretArn"), ("HasHttpSecret", "UseReservationProtocol", "HttpLedgerSecretArn")]:
        expect(f"condition {name}", conditions.get(name),
               {"Fn::And": [{"Condition": kind_condition}, {"Fn::Not": [{"Fn::Equals": [{"Ref": param}, ""]}]}]})

    errors.extend(operators_are_people(tpl))
    errors.extend(console_signs_in_only_through_its_issuer(tpl))
    for role, r in sorted(res.items()):
        if r.get("Type") == "AWS::IAM::Role" and r.get("Properties", {}).get("ManagedPolicyArns"):
            errors.append(f"{role} attaches managed policies (broader than its statements)")
    return errors


def console_signs_in_only_through_its_issuer(tpl):
    """Besides dlqctl's IAM-authorized API there is one door to the control function: the
    console's API of its own (ConsoleApi, only when ConsoleIssuer is set), whose one operations
    route, `POST /console/operations`, is behind a JWT authorizer of exactly the deployment's
    issuer and audience and reaches the control function; beside it only `GET /console/{proxy+}`
    (the page's files, no sign-in), and only those two routes may invoke it; every change to that
    API or its authorizer pages."""
    errors = []
    res = tpl.get("Resources", {})
    for name, r in sorted(res.items()):
        kind, props = r.get("Type"), r.get("Properties", {})
        if kind == "AWS::ApiGatewayV2::Route":
            authorizer = res.get(resource_ref(props.get("AuthorizerId")) or "", {})
            integration = res.get((sub_text(props.get("Target")) or "").removeprefix("integrations/${").rstrip("}"), {})
            jwt = authorizer.get("Properties", {}).get("JwtConfiguration", {})
            # The page's files: GET under /console/ without a sign-in (they hold no data), on
            # the console's API, to the control function, and nothing else without one.
            page = (props.get("RouteKey") == "GET /console/{proxy+}"
                    and props.get("AuthorizationType") == "NONE"
                    and "AuthorizerId" not in props
                    and resource_ref(props.get("ApiId")) == "ConsoleApi"
                    and resource_ref(integration.get("Properties", {}).get("IntegrationUri")) == "ControlFunction"
                    and r.get("Condition") == "ConsoleEnabled")
            if page:
                continue
            ok = (props.get("RouteKey") == "POST /console/operations"
                  and props.get("AuthorizationType") == "JWT"
                  and resource_ref(props.get("ApiId")) == "ConsoleApi"
                  and authorizer.get("Type") == "AWS::ApiGatewayV2::Authorizer"
                  and resource_ref(authorizer.get("Properties", {}).get("ApiId")) == "ConsoleApi"
                  and authorizer.get("Properties", {}).get("AuthorizerType") == "JWT"
                  and jwt.get("Issuer") == {"Ref": "ConsoleIssuer"}
                  and jwt.get("Audience") == [{"Ref": "ConsoleAudience"}]
                  and resource_ref(integration.get("Properties", {}).get("IntegrationUri")) == "ControlFunction"
                  and all(x.get("Condition") == "ConsoleEnabled" for x in (r, authorizer, integration)))
            if not ok:
                errors.append(f"route {name}: only the console's POST /console/operations, on ConsoleApi, behind a JWT authorizer of ConsoleIssuer and ConsoleAudience, to the control function, when ConsoleEnabled")
        if kind == "AWS::Lambda::Permission" and props.get("Principal") == "apigateway.amazonaws.com":
            arn = sub_text(props.get("SourceArn")) or ""
            wanted = {"arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${ConsoleApi}/*/POST/console/operations",
                      "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${ConsoleApi}/*/GET/console/*"}
            if arn not in wanted or resource_ref(props.get("FunctionName")) != "ControlFunction" or r.get("Condition") != "ConsoleEnabled":
                errors.append(f"{name} lets API Gateway invoke {props.get('FunctionName')} from {arn!r}, not the console's route alone")
    rule = tpl.get("Rules", {}).get("ConsoleSignInIsComplete")
    asserted = [a.get("Assert") for a in (rule or {}).get("Assertions", [])]
    for needed in ("ConsoleAudience", "ConsoleGroups"):
        if {"Fn::Not": [{"Fn::Equals": [{"Ref": needed}, ""]}]} not in asserted:
            errors.append(f"a console issuer deployable without {needed} (rule ConsoleSignInIsComplete)")
    pattern = res.get("TamperApiRule", {}).get("Properties", {}).get("EventPattern", {}).get("detail", {})
    for call in ("CreateAuthorizer", "UpdateAuthorizer", "DeleteAuthorizer", "ImportApi", "ReimportApi", "CreateIntegration", "CreateStage"):
        if {"prefix": call} not in pattern.get("eventName", []):
            errors.append(f"the control plane's doors changed unseen: TamperApiRule does not name {call}")
    if "ConsoleApi" in res and "ConsoleApi" not in refs_in(pattern.get("requestParameters")):
        errors.append("the console's API changed unseen: TamperApiRule does not name ConsoleApi")
    return errors


def operators_are_people(tpl):
    """A role a person assumes (trusted by the account, not a service) is assumed by an IAM user of
    this account, with MFA, under a session name that is their user name: the control plane reads
    the person from the session name, so a maker cannot approve under another name. Only the
    control plane's role may seal a decision (the decision key's policy)."""
    errors = []
    res = tpl.get("Resources", {})
    root = {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}
    people = 0
    for name, r in sorted(res.items()):
        if r.get("Type") != "AWS::IAM::Role":
            continue
        for st in r.get("Properties", {}).get("AssumeRolePolicyDocument", {}).get("Statement", []):
            principal = st.get("Principal", {})
            if "Service" in principal:
                continue
            people += 1
            cond = st.get("Condition", {})
            if principal != {"AWS": root}:
                errors.append(f"{name} may be assumed by {principal!r}, not only by this account's IAM users")
            if cond.get("StringEquals", {}).get("sts:RoleSessionName") != "${aws:username}":
                errors.append(f"{name}'s session name is not pinned to the user's name (sts:RoleSessionName = ${{aws:username}})")
            if cond.get("Bool", {}).get("aws:MultiFactorAuthPresent") != "true":
                errors.append(f"{name} may be assumed without MFA")
    if people < 6:
        errors.append(f"{people} operator roles: viewer, maker, approver, auditor, admin and break-glass are needed")
    key = res.get("DecisionKey", {}).get("Properties", {})
    if key.get("KeyUsage") != "GENERATE_VERIFY_MAC":
        errors.append("DecisionKey is not an HMAC key (GENERATE_VERIFY_MAC)")
    for st in key.get("KeyPolicy", {}).get("Statement", []):
        actions = st.get("Action") if isinstance(st.get("Action"), list) else [st.get("Action")]
        seals = any(a in ("kms:GenerateMac", "kms:*", "*") for a in actions)
        if st.get("Effect") == "Allow" and seals and st.get("Principal") != {"AWS": {"Fn::GetAtt": ["ControlRole", "Arn"]}}:
            errors.append(f"DecisionKey lets {st.get('Principal')!r} seal decisions: only ControlRole may")
    return errors


def own_metrics_per_stack(tpl, namespace):
    """The functions' metrics carry a Stack dimension (two stacks in one account must not share a
    metric): every alarm on them names this stack's, and so does every dashboard line."""
    errors = []
    for logical, r in sorted(tpl.get("Resources", {}).items()):
        props = r.get("Properties", {})
        if r.get("Type") == "AWS::CloudWatch::Alarm" and props.get("Namespace") == namespace:
            if {"Name": "Stack", "Value": {"Ref": "StackPrefix"}} not in props.get("Dimensions", []):
                errors.append(f"{logical} watches {namespace}/{props.get('MetricName')} without this stack's Stack dimension")
        if r.get("Type") == "AWS::CloudWatch::Dashboard":
            body = sub_text(props.get("DashboardBody")) or ""
            try:
                widgets = json.loads(body).get("widgets", [])
            except ValueError:
                errors.append(f"{logical}: the dashboard body does not parse")
                continue
            for w in widgets:
                for line in w.get("properties", {}).get("metrics", []):
                    if line and line[0] == namespace and "Stack" not in line:
                        errors.append(f"{logical}: {line[1]} is drawn without this stack's Stack dimension")
    return errors


def nothing_expires_silently(tpl):
    """What an asynchronous path cannot deliver is kept in a queue, never retried for hours nor
    dropped: the replay's asynchronous invocations (no retry, a short maximum age, failures to a
    queue), the schedules (a dead-letter queue), the stream mapping (bisect, a finite number of
    retries, an on-failure destination)."""
    errors = []
    res = tpl.get("Resources", {})

    def a_queue(ref):
        name = resource_ref(ref) if ref is not None else None
        return isinstance(name, str) and res.get(name, {}).get("Type") == "AWS::SQS::Queue"

    for name, r in sorted(res.items()):
        props = r.get("Properties", {})
        if r.get("Type") == "AWS::Scheduler::Schedule":
            if not a_queue(props.get("Target", {}).get("DeadLetterConfig", {}).get("Arn")):
                errors.append(f"{name} has no dead-letter queue: an event it cannot deliver is dropped")
            group = resource_ref(props["GroupName"]) if "GroupName" in props else None
            if not (isinstance(group, str) and res.get(group, {}).get("Type") == "AWS::Scheduler::ScheduleGroup"):
                errors.append(f"{name} is not in the stack's schedule group: the scheduler's role serves only that group, and its alarm watches only it")
        if r.get("Type") == "AWS::Serverless::Function" and any(
            s.get("Properties", {}).get("Target", {}).get("Arn") == {"Fn::GetAtt": [name, "Arn"]}
            for s in res.values() if s.get("Type") == "AWS::Scheduler::Schedule"
        ):
            config = props.get("EventInvokeConfig", {})
            if config.get("MaximumRetryAttempts") != 0 or not 60 <= config.get("MaximumEventAgeInSeconds", 21600) <= 3600:
                errors.append(f"{name} is invoked by a schedule: its EventInvokeConfig must retry nothing and drop an event within an hour")
            if not a_queue(config.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")):
                errors.append(f"{name}'s failed scheduled invocations go nowhere (EventInvokeConfig OnFailure)")
        if r.get("Type") == "AWS::Lambda::EventSourceMapping" and "StartingPosition" in props:
            if props.get("BisectBatchOnFunctionError") is not True or not 0 <= props.get("MaximumRetryAttempts", -1) <= 100:
                errors.append(f"{name}: a stream record the function keeps failing on must be split out and retried a bounded number of times")
            if not a_queue(props.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")):
                errors.append(f"{name}: a stream record given up on goes nowhere (DestinationConfig OnFailure)")
    return errors


def failures_page_a_human(tpl):
    """Every function has an alarm on its errors and one on its throttles; the heartbeat alarms
    (missing data breaching) wait at least two sweep and two seal intervals before they page; the
    schedules' own failures page."""
    errors = []
    res = tpl.get("Resources", {})
    params = tpl.get("Parameters", {})
    alarms = [r.get("Properties", {}) for r in res.values() if r.get("Type") == "AWS::CloudWatch::Alarm"]
    for name, r in sorted(res.items()):
        if r.get("Type") != "AWS::Serverless::Function":
            continue
        for metric in ("Errors", "Throttles"):
            if not any(a.get("Namespace") == "AWS/Lambda" and a.get("MetricName") == metric
                       and {"Name": "FunctionName", "Value": {"Ref": name}} in a.get("Dimensions", []) for a in alarms):
                errors.append(f"no alarm on {name}'s {metric}")
    rate = str(params.get("SweepSchedule", {}).get("Default", ""))
    minutes = {"minute": 1, "minutes": 1, "hour": 60, "hours": 60}
    parts = rate.removeprefix("rate(").removesuffix(")").split()
    sweep_secs = int(parts[0]) * minutes.get(parts[1], 0) * 60 if len(parts) == 2 and parts[0].isdigit() else None
    seal_secs = params.get("SealEveryMinutes", {}).get("Default", 0) * 60
    heartbeat = params.get("HeartbeatSeconds", {}).get("Default", 0)
    beats = [a for a in alarms if a.get("TreatMissingData") == "breaching"]
    if len(beats) < 2:
        errors.append(f"{len(beats)} heartbeat alarms (missing data breaching): the sweep's and the seal's are needed")
    for a in beats:
        if a.get("Period") != {"Ref": "HeartbeatSeconds"}:
            errors.append(f"heartbeat alarm {a.get('MetricName')} does not wait HeartbeatSeconds")
    if sweep_secs is None or heartbeat < 2 * max(sweep_secs, seal_secs):
        errors.append(f"HeartbeatSeconds {heartbeat} is less than two sweep intervals ({rate}) or two seals ({seal_secs} s)")
    if not any(m.get("MetricStat", {}).get("Metric", {}).get("Namespace") == "AWS/Scheduler" for a in alarms for m in a.get("Metrics", [])):
        errors.append("no alarm on the schedules' failures (AWS/Scheduler)")
    return errors


def refs_in(value):
    """Every logical id a Ref or GetAtt inside `value` names."""
    if isinstance(value, dict):
        if "Ref" in value:
            return {value["Ref"]}
        if "Fn::GetAtt" in value:
            return {resource_ref(value)}
        return set().union(*(refs_in(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(refs_in(v) for v in value)) if value else set()
    return set()


def tampering_pages(tpl):
    """A change to a function, a mapping, the schedules, the control plane's API, the WORM bucket
    or a key pages: each is named by an EventBridge rule that targets the alarm topic, and the
    topic's policy lets each such rule publish (else its page is dropped without a word)."""
    errors = []
    res = tpl.get("Resources", {})
    rules = {k: r.get("Properties", {}) for k, r in res.items() if r.get("Type") == "AWS::Events::Rule"
             and any(t.get("Arn") == {"Ref": "AlarmTopic"} for t in r.get("Properties", {}).get("Targets", []))}
    named = set().union(*(refs_in(p.get("EventPattern")) for p in rules.values())) if rules else set()
    watched = ("AWS::Lambda::EventSourceMapping", "AWS::Scheduler::ScheduleGroup", "AWS::Serverless::HttpApi", "AWS::ApiGatewayV2::Api",
               "AWS::S3::Bucket", "AWS::KMS::Key")
    for name, r in sorted(res.items()):
        if r.get("Type") in watched and name not in named:
            errors.append(f"a change to {name} pages no one: no rule to the alarm topic names it")
    if not any(p.get("EventPattern", {}).get("detail", {}).get("requestParameters", {}).get("functionName")
               for p in rules.values()):
        errors.append("a change to the functions' code or configuration pages no one")
    admitted = set()
    for r in res.values():
        if r.get("Type") == "AWS::SNS::TopicPolicy":
            for s in r.get("Properties", {}).get("PolicyDocument", {}).get("Statement", []):
                if s.get("Principal") == {"Service": "events.amazonaws.com"}:
                    admitted |= refs_in(s.get("Condition", {}).get("ArnEquals", {}).get("aws:SourceArn"))
    for name in sorted(set(rules) - admitted):
        errors.append(f"rule {name} targets the alarm topic, whose policy does not let it publish")
    return errors


def credential_refusals_page(tpl, alarm_field):
    """Every function that reaches the ledger (DLQ_LEDGER in its environment) has its log lines of
    a credential refused (`alarm` = the code's value) counted by a metric filter on its log group,
    and an alarm on that metric pages."""
    errors = []
    res = tpl.get("Resources", {})
    filters = [r.get("Properties", {}) for r in res.values() if r.get("Type") == "AWS::Logs::MetricFilter"]
    alarms = [r.get("Properties", {}) for r in res.values() if r.get("Type") == "AWS::CloudWatch::Alarm"]
    pattern = f'{{ $.alarm = "{alarm_field}" }}'
    for name, r in sorted(res.items()):
        props = r.get("Properties", {})
        if r.get("Type") != "AWS::Serverless::Function" or "DLQ_LEDGER" not in props.get("Environment", {}).get("Variables", {}):
            continue
        group = props.get("LoggingConfig", {}).get("LogGroup")
        counted = [(m.get("MetricNamespace"), m.get("MetricName")) for f in filters
                   if f.get("LogGroupName") == group and f.get("FilterPattern") == pattern
                   for m in f.get("MetricTransformations", [])]
        if not counted:
            errors.append(f"{name} reaches the ledger, but no metric filter on its log group counts {pattern}")
        elif not any((a.get("Namespace"), a.get("MetricName")) in counted and {"Ref": "AlarmTopic"} in a.get("AlarmActions", [])
                     for a in alarms):
            errors.append(f"{name}'s refused credentials are counted, but no alarm on them pages")
    return errors


def copies_outlive_the_stores(tpl):
    """With TableBackupDays, every table is backed up daily into a vault locked for at least as
    long as the backups are kept (and the vault kept when the stack goes); with ReplicaBucketArn,
    the WORM bucket's objects are copied there and deletions never are; only break-glass may change
    the bucket's replication."""
    errors = []
    res = tpl.get("Resources", {})
    tables = sorted(k for k, r in res.items() if r.get("Type") == "AWS::DynamoDB::Table")

    def named(resources):
        out = set()
        for ref in resources or []:
            if isinstance(ref, dict) and "Fn::If" in ref:
                ref = ref["Fn::If"][1]
            name = resource_ref(ref) if isinstance(ref, dict) else None
            if isinstance(name, str):
                out.add(name)
        return out

    selection = res.get("TableBackupSelection", {}).get("Properties", {}).get("BackupSelection", {})
    for table in sorted(set(tables) - named(selection.get("Resources"))):
        errors.append(f"{table} is not among the tables backed up (TableBackupSelection)")
    vault = res.get("TableBackupVault", {})
    lock = vault.get("Properties", {}).get("LockConfiguration", {})
    if lock.get("MinRetentionDays") != {"Ref": "TableBackupDays"} or "ChangeableForDays" not in lock:
        errors.append("TableBackupVault is not locked (compliance mode) for TableBackupDays")
    if (vault.get("DeletionPolicy"), vault.get("UpdateReplacePolicy")) != ("Retain", "Retain"):
        errors.append("TableBackupVault is not kept when the stack is deleted or the vault replaced")
    rules = res.get("TableBackupPlan", {}).get("Properties", {}).get("BackupPlan", {}).get("BackupPlanRule", [])
    if not rules or any(r.get("Lifecycle", {}).get("DeleteAfterDays") != {"Ref": "TableBackupDays"}
                        or resource_ref(r.get("TargetBackupVault")) != "TableBackupVault" for r in rules):
        errors.append("the backup plan does not keep every backup TableBackupDays in TableBackupVault")

    bucket = res.get("QuarantineBucket", {}).get("Properties", {})
    branches = bucket.get("ReplicationConfiguration", {}).get("Fn::If", [None, {}, None])
    replication = branches[1] if branches[0] == "ReplicateEvidence" else {}
    rules = replication.get("Rules", [])
    if not rules or any(r.get("DeleteMarkerReplication") != {"Status": "Disabled"}
                        or r.get("Destination", {}).get("Bucket") != {"Ref": "ReplicaBucketArn"} for r in rules):
        errors.append("the WORM bucket's replication does not copy to ReplicaBucketArn, or copies deletions")
    source = "arn:${AWS::Partition}:s3:::${StackPrefix}-quarantine-${AWS::AccountId}-${AWS::Region}"
    allowed = {(a, source) for a in ("s3:GetReplicationConfiguration", "s3:ListBucket")} | {
        (a, source + "/*") for a in ("s3:GetObjectVersionForReplication", "s3:GetObjectVersionAcl",
                                      "s3:GetObjectVersionTagging", "s3:GetObjectRetention", "s3:GetObjectLegalHold")} | {
        (a, "${ReplicaBucketArn}/*") for a in ("s3:ReplicateObject", "s3:ReplicateTags")}
    # With CustomerManagedKeys: decrypt the source through S3 only, encrypt with the replica's key.
    allowed |= {("kms:Decrypt", "DataKey via s3"), ("kms:Encrypt", "ReplicaKmsKeyArn")}
    role = res.get("EvidenceReplicationRole", {}).get("Properties", {})
    granted = set()
    for policy in role.get("Policies", []):
        for st in policy.get("PolicyDocument", {}).get("Statement", []):
            if "Fn::If" in st:
                condition, st = st["Fn::If"][0], st["Fn::If"][1]
                if condition != "UseCustomerKeys":
                    granted.add((None, f"a statement under {condition}"))
                    continue
            actions = st["Action"] if isinstance(st.get("Action"), list) else [st.get("Action")]
            resources = st["Resource"] if isinstance(st.get("Resource"), list) else [st.get("Resource")]
            via = st.get("Condition", {}).get("StringEquals", {}).get("kms:ViaService")
            suffix = " via s3" if via == {"Fn::Sub": "s3.${AWS::Region}.amazonaws.com"} else ""
            granted |= {(a, (sub_text(r) or resource_ref(r) + suffix) if isinstance(r, dict) else r)
                        for a in actions for r in resources}
    if granted != allowed or role.get("ManagedPolicyArns"):
        errors.append(f"the replication role grants more or less than reading the WORM bucket and writing the replica's objects: {sorted(granted ^ allowed)}")
    denied = [st for st in res.get("QuarantineBucketPolicy", {}).get("Properties", {}).get("PolicyDocument", {}).get("Statement", [])
              if st.get("Sid") == "DenyConfigurationChangesButBreakGlass"]
    if not denied or "s3:PutReplicationConfiguration" not in denied[0].get("Action", []):
        errors.append("the WORM bucket's replication may be changed by others than break-glass")
    return errors


def stores_use_the_data_key(tpl):
    """With CustomerManagedKeys (on by default), every queue, table, log group and backup vault and
    the WORM bucket is encrypted with the stack's DataKey, and with each service's own key
    otherwise; the key is kept when the stack goes, rotated, and only break-glass may disable or
    delete it; its policy names no one but the account, the stack's log groups and the producers
    through SQS; every role that writes a store may use it through the stores only, every operator
    role (the auditor's included) may decrypt through them only."""
    errors = []
    res = tpl.get("Resources", {})
    params = tpl.get("Parameters", {})
    if params.get("CustomerManagedKeys", {}).get("Default") != "true":
        errors.append("CustomerManagedKeys is not on by default")
    key_arn = {"Fn::GetAtt": ["DataKey", "Arn"]}
    with_key = {"Fn::If": ["UseCustomerKeys", key_arn, {"Ref": "AWS::NoValue"}]}
    for name, r in sorted(res.items()):
        kind, props = r.get("Type"), r.get("Properties", {})
        if kind == "AWS::SQS::Queue":
            if (props.get("KmsMasterKeyId"), props.get("SqsManagedSseEnabled")) != (
                    with_key, {"Fn::If": ["UseCustomerKeys", False, True]}):
                errors.append(f"{name} is not encrypted with DataKey (SSE-SQS only without it)")
        elif kind == "AWS::DynamoDB::Table":
            sse = props.get("SSESpecification", {})
            if sse != {"SSEEnabled": True, "SSEType": {"Fn::If": ["UseCustomerKeys", "KMS", {"Ref": "AWS::NoValue"}]},
                       "KMSMasterKeyId": with_key}:
                errors.append(f"{name} is not encrypted with DataKey")
        elif kind == "AWS::Logs::LogGroup":
            if props.get("KmsKeyId") != with_key:
                errors.append(f"{name} is not encrypted with DataKey")
        elif kind == "AWS::Backup::BackupVault":
            if props.get("EncryptionKeyArn") != with_key:
                errors.append(f"{name} is not encrypted with DataKey")
        elif kind == "AWS::S3::Bucket":
            rules = props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
            wanted = {"Fn::If": ["UseCustomerKeys", {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key_arn},
                                 {"SSEAlgorithm": "AES256"}]}
            if [r.get("ServerSideEncryptionByDefault") for r in rules] != [wanted]:
                errors.append(f"{name} is not encrypted with DataKey")
    key = res.get("DataKey", {})
    if (key.get("Condition"), key.get("DeletionPolicy"), key.get("UpdateReplacePolicy")) != ("UseCustomerKeys", "Retain", "Retain") \
            or key.get("Properties", {}).get("EnableKeyRotation") is not True:
        errors.append("DataKey is not kept with the evidence it encrypts, or not rotated")
    statements = key.get("Properties", {}).get("KeyPolicy", {}).get("Statement", [])
    sids = [(st.get("Fn::If", [None, st])[1]).get("Sid") for st in statements]
    if sids != ["AccountAdministers", "OnlyBreakGlassDisablesOrDeletes", "LogsEncryptTheStacksLogGroups", "ProducersSendThroughSqs"]:
        errors.append(f"DataKey's policy has other statements than the account's, the deny, the log groups' and the producers': {sids}")
    for st in statements:
        st = st.get("Fn::If", [None, st])[1]
        if st.get("Sid") == "OnlyBreakGlassDisablesOrDeletes" and (
                st.get("Effect") != "Deny" or sorted(st.get("Action", [])) != ["kms:DisableKey", "kms:ScheduleKeyDeletion"]
                or st.get("Condition") != {"ArnNotEquals": {"aws:PrincipalArn": {"Fn::GetAtt": ["BreakGlassRole", "Arn"]}}}):
            errors.append("DataKey may be disabled or deleted by others than break-glass")
        if st.get("Sid") == "ProducersSendThroughSqs" and st.get("Condition", {}).get("StringEquals", {}).get("kms:ViaService") != {"Fn::Sub": "sqs.${AWS::Region}.amazonaws.com"}:
            errors.append("the producers may use DataKey outside SQS")
        if st.get("Sid") == "LogsEncryptTheStacksLogGroups" and "ArnLike" not in st.get("Condition", {}):
            errors.append("any log group may use DataKey")
    writers = {"ConsumerRole", "EnricherRole", "ReplayRole", "ControlRole", "ReferenceAuditRole", "SchedulerRole", "BreakGlassRole", "TableBackupRole"}
    readers = {"ViewerRole", "MakerRole", "ApproverRole", "AuditorRole", "AdminRole"}
    via = lambda *services: [{"Fn::Sub": f"{s}.${{AWS::Region}}.amazonaws.com"} for s in services]  # noqa: E731
    for policy, roles, actions, services in [
            ("DataKeyWriters", writers, ["kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"],
             via("sqs", "dynamodb", "s3", "backup")),
            ("DataKeyReaders", readers, ["kms:Decrypt", "kms:DescribeKey"], via("dynamodb", "s3", "logs"))]:
        props = res.get(policy, {}).get("Properties", {})
        named = {resource_ref(r.get("Fn::If", [None, r])[1]) for r in props.get("Roles", [])}
        if named != roles:
            errors.append(f"{policy} is given to {sorted(named)}, not {sorted(roles)}")
        for st in props.get("PolicyDocument", {}).get("Statement", []):
            if sorted(st.get("Action", [])) != actions or st.get("Resource") != key_arn \
                    or st.get("Condition") != {"StringEquals": {"kms:ViaService": services}}:
                errors.append(f"{policy} grants more than {actions} on DataKey through {services}")
    if "TamperKeysRule" in res:
        ids = res["TamperKeysRule"]["Properties"]["EventPattern"]["detail"]["requestParameters"]["keyId"]
        if {"Fn::If": ["UseCustomerKeys", key_arn, {"Ref": "AWS::NoValue"}]} not in ids:
            errors.append("DataKey's policy may change, or the key be disabled or deleted, unseen")
    return errors


def every_alarm_on_the_dashboard(tpl):
    """The runbook sends the on-call to the dashboard's alarm widget: every alarm is on it."""
    res = tpl.get("Resources", {})
    alarms = {k for k, r in res.items() if r.get("Type") == "AWS::CloudWatch::Alarm"}
    shown = set()
    for r in res.values():
        if r.get("Type") == "AWS::CloudWatch::Dashboard":
            try:
                widgets = json.loads(sub_text(r.get("Properties", {}).get("DashboardBody")) or "{}").get("widgets", [])
            except ValueError:
                continue
            for w in widgets:
                for a in w.get("properties", {}).get("alarms", []):
                    if a.startswith("${") and a.endswith(".Arn}"):
                        shown.add(a[2:-len(".Arn}")])
    return [f"alarm {a} is not on the dashboard's alarm widget" for a in sorted(alarms - shown)]


def alarms_can_publish(tpl):
    """Every topic an alarm notifies is encrypted, with a key of this template whose policy lets
    CloudWatch use it (an AWS-managed key cannot: CloudWatch's notifications would be dropped)."""
    errors = []
    res = tpl.get("Resources", {})
    topics = {resource_ref(a) for r in res.values() if r.get("Type") == "AWS::CloudWatch::Alarm"
              for a in r.get("Properties", {}).get("AlarmActions", [])}
    for topic in sorted(t for t in topics if isinstance(t, str)):
        key_ref = res.get(topic, {}).get("Properties", {}).get("KmsMasterKeyId")
        key = res.get(resource_ref(key_ref) if isinstance(key_ref, dict) else "", {})
        if key.get("Type") != "AWS::KMS::Key":
            errors.append(f"alarm topic {topic} is encrypted with {key_ref!r}, not a key of this template that grants CloudWatch")
            continue
        grants = [st for st in key.get("Properties", {}).get("KeyPolicy", {}).get("Statement", [])
                  if st.get("Effect") == "Allow" and (st.get("Principal") or {}).get("Service") == "cloudwatch.amazonaws.com"]
        actions = {a for st in grants for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}
        if not {"kms:Decrypt", "kms:GenerateDataKey*"} <= actions:
            errors.append(f"the key of alarm topic {topic} does not let CloudWatch use it (kms:Decrypt, kms:GenerateDataKey*)")
    return errors


SQS_DEFAULT_VISIBILITY = 30
SQS_DEFAULT_RETENTION = 345600
SQS_MAX_RETENTION = 1209600
LAMBDA_DEFAULT_TIMEOUT = 3


def cross_resource_rules(tpl):
    """Rules between resources that AWS enforces at deploy time, or that decide whether a message
    can expire unseen: read from the template alone, whatever the code says.
    - an SQS event source's visibility timeout is at least six times its function's timeout
      (Lambda refuses less than one; AWS recommends six);
    - a dead-letter queue keeps messages longer than the queue that redrives into it (SQS keeps a
      message's original enqueue time across the redrive);
    - an alarm on a queue's oldest message fires before that message would expire."""
    errors = []
    res = tpl.get("Resources", {})

    def queue_of(ref):
        name = resource_ref(ref) if ref is not None else None
        queue = res.get(name, {}) if isinstance(name, str) else {}
        return (name, queue.get("Properties", {})) if queue.get("Type") == "AWS::SQS::Queue" else (None, None)

    watched = set()
    for logical, r in sorted(res.items()):
        props = r.get("Properties", {})
        if r.get("Type") == "AWS::Lambda::EventSourceMapping":
            qname, queue = queue_of(props.get("EventSourceArn"))
            fn = res.get(resource_ref(props.get("FunctionName")) or "", {}).get("Properties", {})
            if queue is not None and "FifoQueue" in queue and "MaximumBatchingWindowInSeconds" in props:
                window = props["MaximumBatchingWindowInSeconds"]
                condition = (queue["FifoQueue"].get("Fn::If") or [None])[0] if isinstance(queue["FifoQueue"], dict) else None
                if not (isinstance(window, dict) and window.get("Fn::If", [None, None])[:2] == [condition, {"Ref": "AWS::NoValue"}]):
                    errors.append(f"{logical}: a batching window on {qname}, which may be FIFO (Lambda refuses one there)")
            if queue is not None:
                visibility = queue.get("VisibilityTimeout", SQS_DEFAULT_VISIBILITY)
                timeout = fn.get("Timeout", LAMBDA_DEFAULT_TIMEOUT)
                if visibility < 6 * timeout:
                    errors.append(f"{logical}: {qname} VisibilityTimeout {visibility} s is less than six times its function's timeout ({timeout} s)")
        if r.get("Type") == "AWS::SQS::Queue" and "RedrivePolicy" in props:
            dname, dlq = queue_of(props["RedrivePolicy"].get("deadLetterTargetArn"))
            if dlq is not None:
                mine = props.get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION)
                theirs = dlq.get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION)
                # Equal is the best SQS allows when both keep messages its longest (14 days).
                if theirs < mine or (theirs == mine and mine < SQS_MAX_RETENTION):
                    errors.append(f"{logical} redrives into {dname}, which keeps messages {theirs} s, not longer than its own {mine} s")
        if r.get("Type") == "AWS::CloudWatch::Alarm" and props.get("MetricName") == "ApproximateAgeOfOldestMessage":
            for d in props.get("Dimensions", []):
                value = d.get("Value")
                qname, queue = queue_of(value) if isinstance(value, dict) else (None, None)
                if queue is not None:
                    watched.add(qname)
                    retention = queue.get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION)
                    if props.get("Threshold", 0) >= retention:
                        errors.append(f"{logical} fires after {props.get('Threshold')} s, not before {qname}'s messages expire ({retention} s)")
    for logical, r in sorted(res.items()):
        if r.get("Type") == "AWS::SQS::Queue" and logical not in watched:
            errors.append(f"no alarm on the age of {logical}'s oldest message: its messages could expire unseen")
    return errors


def mutations(tpl):
    """Single changes that the check must catch: one per kind of setting."""
    def mutate(path_fn, label):
        t = copy.deepcopy(tpl)
        path_fn(t)
        return label, t

    res = lambda t: t["Resources"]  # noqa: E731
    return [
        mutate(lambda t: res(t)["MainQueue"]["Properties"].__setitem__("VisibilityTimeout", 60), "main queue visibility"),
        mutate(lambda t: res(t)["EnricherFunction"]["Properties"].__setitem__("Timeout", 120), "enricher timeout"),
        mutate(lambda t: res(t)["ConsumerFunction"]["Properties"].pop("MemorySize"), "the consumer's memory size left to the default"),
        mutate(lambda t: res(t)["DeadLetterQueue"]["Properties"].__setitem__("MessageRetentionPeriod", 345600), "DLQ retention"),
        # Caught elsewhere, each tried: a table key, an index, the dedup TTL or the reference stream
        # by the integration tests (the local stack is built from this template; tests/provision.rs
        # names what no request shows); names, variables, outputs, timeouts, parameter ranges and
        # defaults by shared/harness/src/template/contract.rs on the resolved template.
        mutate(lambda t: res(t)["QuarantineBucket"]["Properties"]["ObjectLockConfiguration"]["Rule"]["DefaultRetention"].__setitem__("Mode", "GOVERNANCE"), "Object Lock mode"),
        mutate(lambda t: t["Parameters"]["WormRetentionDays"].__setitem__("Default", 2555), "a retention short of a fiscal year's end"),
        mutate(lambda t: res(t).pop("ReplayThrottlesAlarm"), "no alarm on the replay's throttles"),
        mutate(lambda t: res(t)["SealHeartbeatAlarm"]["Properties"].__setitem__("TreatMissingData", "notBreaching"), "a heartbeat silent when its schedule stops"),
        mutate(lambda t: t["Parameters"]["SealEveryMinutes"].__setitem__("Default", 60), "a heartbeat shorter than two seal intervals"),
        mutate(lambda t: res(t).pop("SchedulerTargetErrorsAlarm"), "no alarm on the schedules' failures"),
        mutate(lambda t: res(t)["ReplaySchedule"]["Properties"]["Target"].pop("DeadLetterConfig"), "a schedule without a dead-letter queue"),
        mutate(lambda t: res(t)["AuditSealSchedule"]["Properties"].pop("GroupName"), "a schedule in the account's default group"),
        mutate(lambda t: res(t).pop("TamperKeysRule"), "a key's policy rewritten unseen"),
        mutate(lambda t: res(t).pop("ReplayCredentialRefusedFilter"), "the replay's refused credentials uncounted"),
        mutate(lambda t: res(t)["TableBackupSelection"]["Properties"]["BackupSelection"]["Resources"].pop(3), "the audit table left out of the backups"),
        mutate(lambda t: res(t)["TableBackupVault"]["Properties"].pop("LockConfiguration"), "a backup vault whose backups anyone may delete"),
        mutate(lambda t: res(t)["QuarantineBucket"]["Properties"]["ReplicationConfiguration"]["Fn::If"][1]["Rules"][0].__setitem__("DeleteMarkerReplication", {"Status": "Enabled"}), "deletions replicated to the evidence's copy"),
        mutate(lambda t: res(t)["QuarantineBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"][5]["Action"].remove("s3:PutReplicationConfiguration"), "the evidence's replication changed by anyone"),
        mutate(lambda t: res(t)["EvidenceReplicationRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"].append({"Effect": "Allow", "Action": "s3:*", "Resource": "*"}), "a replication role that may do anything in S3"),
        mutate(lambda t: t["Parameters"]["CustomerManagedKeys"].__setitem__("Default", "false"), "the stores on AWS's keys by default"),
        mutate(lambda t: res(t)["MainQueue"]["Properties"].pop("KmsMasterKeyId"), "the main queue on SSE-SQS with DataKey on"),
        mutate(lambda t: res(t)["AuditTable"]["Properties"].__setitem__("SSESpecification", {"SSEEnabled": True}), "the audit table on DynamoDB's key"),
        mutate(lambda t: res(t)["ControlApiLogs"]["Properties"].pop("KmsKeyId"), "the access log on the Logs service key"),
        mutate(lambda t: res(t)["TableBackupVault"]["Properties"].pop("EncryptionKeyArn"), "the backups on AWS Backup's key"),
        mutate(lambda t: res(t)["QuarantineBucket"]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0].__setitem__("ServerSideEncryptionByDefault", {"SSEAlgorithm": "AES256"}), "the WORM bucket on S3's key"),
        mutate(lambda t: res(t)["DataKey"].__setitem__("DeletionPolicy", "Delete"), "the evidence's key deleted with the stack"),
        mutate(lambda t: res(t)["DataKey"]["Properties"]["KeyPolicy"]["Statement"].pop(1), "the evidence's key deletable by any administrator"),
        mutate(lambda t: res(t)["DataKey"]["Properties"]["KeyPolicy"]["Statement"].append({"Sid": "Anyone", "Effect": "Allow", "Principal": "*", "Action": "kms:Decrypt", "Resource": "*"}), "the evidence's key open to anyone"),
        mutate(lambda t: res(t)["DataKey"]["Properties"]["KeyPolicy"]["Statement"][3]["Fn::If"][1]["Condition"].pop("StringEquals"), "producers using the key outside SQS"),
        mutate(lambda t: res(t)["DataKeyReaders"]["Properties"]["Roles"].pop(3), "the auditor unable to read the stores"),
        mutate(lambda t: res(t)["DataKeyWriters"]["Properties"]["PolicyDocument"]["Statement"][0].pop("Condition"), "the functions decrypting outside the stores"),
        mutate(lambda t: res(t)["DataKeyReaders"]["Properties"]["PolicyDocument"]["Statement"][0]["Action"].append("kms:GenerateDataKey*"), "operators encrypting with the stores' key"),
        mutate(lambda t: res(t)["DataKeyReaders"]["Properties"]["PolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]["kms:ViaService"].append({"Fn::Sub": "sqs.${AWS::Region}.amazonaws.com"}), "operators reading the queues' messages"),
        mutate(lambda t: res(t)["TamperKeysRule"]["Properties"]["EventPattern"]["detail"]["requestParameters"]["keyId"].pop(), "the evidence's key disabled unseen"),
        mutate(lambda t: res(t)["EvidenceReplicationRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][3]["Fn::If"][1].pop("Condition"), "the replication role decrypting outside S3"),
        mutate(lambda t: res(t)["CredentialRefusedAlarm"]["Properties"].__setitem__("MetricName", "LedgerCredentialsRefused"), "refused credentials counted under a name no alarm watches"),
        mutate(lambda t: res(t)["AlarmTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"][0]["Condition"]["ArnEquals"]["aws:SourceArn"].pop(), "a tampering rule whose page the topic refuses"),
        mutate(lambda t: t["Rules"].pop("AlarmsReachSomeone"), "a deployment whose alarms page no one"),
        mutate(lambda t: t["Parameters"]["ConsumerMaxConcurrency"].__setitem__("Default", 20), "a consumer event source wider than its reservation"),
        mutate(lambda t: t["Parameters"]["ReplayReservedConcurrency"].__setitem__("Default", 2), "a replay reservation the schedules share with manual runs"),
        mutate(lambda t: res(t)["DeadLetterQueue"]["Properties"].pop("RedrivePolicy"), "dead letters left to expire in the DLQ"),
        mutate(lambda t: res(t)["ParkingQueue"]["Properties"].pop("FifoQueue"), "a standard parking queue behind a FIFO DLQ"),
        mutate(lambda t: res(t)["ParkingQueue"]["Properties"].__setitem__("MessageRetentionPeriod", 345600), "a parking queue that keeps less than the DLQ"),
        mutate(lambda t: res(t).pop("ParkedAlarm"), "parked dead letters unseen"),
        mutate(lambda t: res(t)["ReplayFunction"]["Properties"]["EventInvokeConfig"].__setitem__("MaximumRetryAttempts", 2), "a failed sweep retried by Lambda"),
        mutate(lambda t: res(t)["ReplayFunction"]["Properties"].pop("EventInvokeConfig"), "scheduled invocations held for hours"),
        mutate(lambda t: res(t)["ReferenceAuditEvents"]["Properties"].__setitem__("MaximumRetryAttempts", -1), "a bad stream record retried forever"),
        mutate(lambda t: res(t)["ReferenceAuditEvents"]["Properties"].pop("DestinationConfig"), "a stream record given up on without a trace"),
        mutate(lambda t: t["Parameters"]["WormRetentionDays"].__setitem__("MinValue", 1), "a retention floor of one day"),
        mutate(lambda t: res(t)["QuarantineBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"].pop(2), "puts without their own retention allowed"),
        mutate(lambda t: res(t)["QuarantineBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"][3]["Condition"]["NumericLessThan"].__setitem__("s3:object-lock-remaining-retention-days", 1), "puts retained a day allowed"),
        mutate(lambda t: res(t)["DeadLetterQueue"]["Properties"].pop("FifoQueue"), "a standard DLQ behind a FIFO main queue"),
        mutate(lambda t: res(t)["MainQueue"].pop("UpdateReplacePolicy"), "the main queue deleted when replaced"),
        mutate(lambda t: res(t)["ConsumerEvents"]["Properties"].__setitem__("MaximumBatchingWindowInSeconds", 1), "a batching window on a FIFO queue"),
        mutate(lambda t: res(t)["MainQueue"]["Properties"].__setitem__("QueueName", {"Fn::Sub": "${StackPrefix}-main"}), "a FIFO queue without .fifo"),
        mutate(lambda t: t["Outputs"].pop("EnricherRole"), "a function's role missing from the outputs"),
        mutate(lambda t: res(t).__setitem__("SpareAlarm", copy.deepcopy(res(t)["MainQueueAgeAlarm"])), "an alarm missing from the dashboard"),
        mutate(lambda t: res(t)["DeadLetterQueue"]["Properties"].pop("VisibilityTimeout"), "the DLQ left at SQS's 30 s visibility"),
        mutate(lambda t: res(t)["MainQueueAgeAlarm"]["Properties"].__setitem__("Threshold", 400000), "the main queue's age alarm after its retention"),
        mutate(lambda t: res(t).pop("MainQueueAgeAlarm"), "no age alarm on the main queue"),
        mutate(lambda t: res(t)["AlarmTopic"]["Properties"].__setitem__("KmsMasterKeyId", "alias/aws/sns"), "the alarm topic on the AWS-managed key"),
        mutate(lambda t: res(t)["DlqOverflowAlarm"]["Properties"].pop("Dimensions"), "an alarm on every stack's metric"),
        mutate(lambda t: res(t)["AlarmTopicKey"]["Properties"]["KeyPolicy"]["Statement"].pop(1), "the key's grant to CloudWatch dropped"),
        mutate(lambda t: res(t)["MakerRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"].pop("StringEquals"), "an operator session named as its holder likes"),
        mutate(lambda t: res(t)["ApproverRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"].pop("Bool"), "an operator role assumed without MFA"),
        mutate(lambda t: res(t)["AdminRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0].__setitem__("Principal", {"AWS": "*"}), "an operator role anyone may assume"),
        mutate(lambda t: res(t)["DecisionKey"]["Properties"]["KeyPolicy"]["Statement"][0]["Action"].append("kms:GenerateMac"), "the account able to seal decisions"),
        mutate(lambda t: res(t)["ReplayRole"]["Properties"].__setitem__("ManagedPolicyArns", ["arn:aws:iam::aws:policy/AmazonSQSFullAccess"]), "a managed policy on a role"),
        mutate(lambda t: t["Conditions"].__setitem__("UseDynamoLedger", {"Fn::Not": [{"Condition": "UsePostgres"}]}), "the DynamoDB ledger's grants on HTTP deployments too"),
        mutate(lambda t: t["Conditions"]["HasHttpSecret"]["Fn::And"].pop(0), "the token's grant without the HTTP ledger"),
        mutate(lambda t: res(t)["ConsoleAuthorizer"]["Properties"]["JwtConfiguration"].pop("Audience"), "a console sign-in of any audience"),
        mutate(lambda t: res(t)["ConsoleOperationsRoute"]["Properties"].__setitem__("AuthorizationType", "NONE"), "a console route anyone may call"),
        mutate(lambda t: res(t)["ConsolePageRoute"]["Properties"].__setitem__("RouteKey", "POST /console/{proxy+}"), "operations without a sign-in on the page's route"),
        mutate(lambda t: res(t)["ConsolePageRoute"]["Properties"].__setitem__("RouteKey", "GET /{proxy+}"), "the page's route beyond /console/"),
        mutate(lambda t: res(t)["ConsolePageRoute"]["Properties"].__setitem__("ApiId", {"Ref": "ControlApi"}), "a route without a sign-in on dlqctl's API"),
        mutate(lambda t: res(t)["ConsolePagePermission"]["Properties"].__setitem__("SourceArn", {"Fn::Sub": "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${ConsoleApi}/*/*/console/*"}), "the control function invocable by any method under /console/"),
        mutate(lambda t: res(t)["ConsoleOperationsRoute"]["Properties"].__setitem__("RouteKey", "POST /operations"), "dlqctl's route behind the console's authorizer"),
        mutate(lambda t: res(t)["ConsoleOperationsRoute"]["Properties"].__setitem__("ApiId", {"Ref": "ControlApi"}), "the console's route on the API SAM re-imports"),
        mutate(lambda t: res(t)["ConsoleIntegration"]["Properties"].__setitem__("IntegrationUri", {"Fn::GetAtt": ["ReplayFunction", "Arn"]}), "the console's route to another function"),
        mutate(lambda t: res(t)["ConsoleInvokePermission"]["Properties"].__setitem__("SourceArn", {"Fn::Sub": "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${ConsoleApi}/*"}), "the control function invocable from any route"),
        mutate(lambda t: res(t)["ConsoleInvokePermission"]["Properties"].__setitem__("SourceArn", {"Fn::Sub": "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:*/*/POST/console/operations"}), "the control function invocable from any API of the account"),
        mutate(lambda t: res(t)["TamperApiRule"]["Properties"]["EventPattern"]["detail"]["requestParameters"].__setitem__("apiId", [{"Ref": "ControlApi"}]), "the console's API changed unseen"),
        mutate(lambda t: t["Rules"]["ConsoleSignInIsComplete"]["Assertions"].pop(0), "a console issuer without an audience"),
        mutate(lambda t: res(t)["TamperApiRule"]["Properties"]["EventPattern"]["detail"]["eventName"].pop(), "the console's issuer swapped unseen"),
    ]


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[2]) as f:
        spec = json.load(f)
    tpl, matches = decode(sys.argv[1])
    if tpl is None:
        print(f"cannot read {sys.argv[1]}: {matches}", file=sys.stderr)
        return 1
    errors = check(tpl, spec)
    if errors:
        print("infra/template.yaml: the template check found:")
        for e in errors:
            print(f"  - {e}")
        return 1
    if "--self-test" in sys.argv:
        missed = [label for label, t in mutations(tpl) if not check(t, spec)]
        if missed:
            print(f"the template check missed: {', '.join(missed)}")
            return 1
        print(f"template check: agrees with the code; {len(mutations(tpl))} single-setting changes all detected")
    else:
        print("template check: agrees with the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
