// Evaluate IAM requests offline against policies, with @cloud-copilot/iam-simulate (installed by
// infra/tools.sh into .local-aws/iam-simulate). Reads {"cases": [...]} on standard input, each
// case {name, principal, action, resource, account, identityPolicies, resourcePolicy?, context};
// prints one JSON array: per case {name, result, ignored, errors}, where result is "Allowed",
// "ExplicitlyDenied", "ImplicitlyDenied" or "Error". Used by tests/iam_offline.rs.
"use strict";
const path = require("path");
const { createRequire } = require("module");

const root = path.resolve(__dirname, "..", ".local-aws", "iam-simulate");
const { runSimulation } = createRequire(path.join(root, "package.json"))("@cloud-copilot/iam-simulate");

async function evaluate(c) {
  const r = await runSimulation(
    {
      request: {
        principal: c.principal,
        action: c.action,
        resource: { resource: c.resource, accountId: c.account },
        contextVariables: c.context || {},
      },
      identityPolicies: (c.identityPolicies || []).map((policy, i) => ({ name: `policy-${i}`, policy })),
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      resourcePolicy: c.resourcePolicy || undefined,
    },
    {},
  );
  if (r.resultType === "error") {
    return { name: c.name, result: "Error", ignored: [], errors: r.errors };
  }
  const one = r.resultType === "single" ? r.result : r.results[0];
  return { name: c.name, result: r.overallResult, ignored: (one && one.ignoredContextKeys) || [], errors: null };
}

async function main() {
  let input = "";
  for await (const chunk of process.stdin) input += chunk;
  const { cases } = JSON.parse(input);
  const out = [];
  for (const c of cases) out.push(await evaluate(c));
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String((e && e.stack) || e) + "\n");
  process.exit(1);
});
