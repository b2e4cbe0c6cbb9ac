// End-to-end MCP client on the official npm SDK, run by
// integration/mcp_npm_test.go: it connects to billingd over Streamable HTTP
// with a bearer token, lists the tools, runs the two-call upgrade the way an
// agent should (first call, show the summary, second call with the token),
// having first tried the MCP Apps view's confirm_plan_change, which a client
// without the extension may not call, repeats the second call (answered with
// the original result, replayed), reads the subscription, and prints one JSON
// object describing what it saw. Any failure exits non-zero with a message
// on stderr.
//
// Environment: BILLINGD_MCP_URL (http://host:port/mcp),
// BILLINGD_ACCESS_TOKEN (bearer token), BILLINGD_PLAN (plan to upgrade to).
// With BILLINGD_MCP_COMMAND (the billingd binary) it connects over stdio
// instead, the way a local agent does: the SDK starts `billingd mcp stdio`
// with BILLINGD_URL (BILLINGD_MCP_URL without /mcp) and BILLINGD_ACCESS_TOKEN
// as its only variables besides the SDK's few safe defaults (PATH, HOME, …).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

function need(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
}

async function call(client, name, args) {
  // callTool validates structuredContent against the tool's output schema,
  // for errors too: a shape billingd did not declare fails here.
  return client.callTool({ name, arguments: args });
}

function summarize(result) {
  return {
    isError: result.isError === true,
    structuredContent: result.structuredContent,
    text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text),
  };
}

// connectTo is the transport to billingd: Streamable HTTP, or stdio through
// the bridge when BILLINGD_MCP_COMMAND names the binary.
function connectTo(url, token) {
  const command = process.env.BILLINGD_MCP_COMMAND;
  if (!command) {
    return new StreamableHTTPClientTransport(url, {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
  }
  const transport = new StdioClientTransport({
    command, args: ["mcp", "stdio"], stderr: "inherit",
    env: { BILLINGD_URL: url.href.replace(/\/mcp$/, ""), BILLINGD_ACCESS_TOKEN: token },
  });
  // Only HTTP transports are told the negotiated version; record it here too.
  transport.setProtocolVersion = (version) => { transport.protocolVersion = version; };
  return transport;
}

async function main() {
  const url = new URL(need("BILLINGD_MCP_URL"));
  const token = need("BILLINGD_ACCESS_TOKEN");
  const to = need("BILLINGD_PLAN");

  const transport = connectTo(url, token);
  const client = new Client({ name: "billingd-npm-e2e", version: "1.0.0" });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    const first = await call(client, "upgrade_plan", { to });
    if (first.isError) throw new Error(`first call failed: ${JSON.stringify(first.structuredContent)}`);
    // This client renders no MCP Apps view: the view's tool is refused.
    const viewOnly = await call(client, "confirm_plan_change", {
      confirmation_id: first.structuredContent.confirmation_id, confirm_token: first.structuredContent.confirm_token,
    });
    // An agent shows first.structuredContent.summary to its user here and
    // makes the second call only after the user agrees.
    const second = await call(client, "upgrade_plan", { to, confirm_token: first.structuredContent.confirm_token });
    const replay = await call(client, "upgrade_plan", { to, confirm_token: first.structuredContent.confirm_token });
    // The operations of contract §15, each with its two calls: the client
    // checks every result against the tool's output schema.
    const both = async (tool, args) => {
      const ask = await call(client, tool, args);
      if (ask.isError) return ask;
      return call(client, tool, { ...args, confirm_token: ask.structuredContent.confirm_token });
    };
    const seats = await both("change_seats", { quantity: 3 });
    const cancel = await both("cancel_subscription", { at: "period_end", reason: "unused" });
    const resume = await both("resume_subscription", {});
    const subscription = await call(client, "get_subscription", {});
    process.stdout.write(JSON.stringify({
      protocolVersion: transport.protocolVersion,
      server: client.getServerVersion(),
      tools: tools.map((t) => ({ name: t.name, annotations: t.annotations, required: t.inputSchema.required ?? [] })),
      first: summarize(first),
      viewOnly: summarize(viewOnly),
      second: summarize(second),
      replay: summarize(replay),
      seats: summarize(seats),
      cancel: summarize(cancel),
      resume: summarize(resume),
      subscription: summarize(subscription),
    }) + "\n");
  } finally {
    await client.close();
  }
}

main().catch((err) => {
  process.stderr.write(`npm MCP client: ${err?.stack ?? err}\n`);
  process.exit(1);
});
