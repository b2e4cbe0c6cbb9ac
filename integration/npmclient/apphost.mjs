// A minimal MCP Apps host for billingd's browser test (TestMCPAppViewInBrowser),
// built from the official pieces only: the npm MCP client talks to billingd,
// and ext-apps' AppBridge talks to billingd's view in a sandboxed iframe over
// postMessage. The test bundles it with esbuild (pinned in package-lock.json).
//
// Query parameters: token (bearer token), tool (a change tool), to (the
// plan) or quantity (the seats), and at ("now" or "period_end"), each
// only when the tool takes it. What the model would read of the first
// call is kept in window.modelSaw; links the view asks the host to open, in
// window.openedLinks; context updates the view sends the model, in
// window.modelContext.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { AppBridge, PostMessageTransport, getToolUiResourceUri } from "@modelcontextprotocol/ext-apps/app-bridge";

const APPS = "io.modelcontextprotocol/ui";
const MIME = "text/html;profile=mcp-app";

const params = new URLSearchParams(location.search);
const status = (s) => { document.getElementById("host-status").textContent = s; };
window.openedLinks = [];
window.modelContext = [];

// cspFor turns the view's declared allow-lists into the policy the host
// imposes (empty lists: nothing but the page's own inline code).
function cspFor(meta) {
  const csp = meta?.ui?.csp ?? {};
  const list = (l) => (l && l.length ? l.join(" ") : "'none'");
  return [
    "default-src 'none'",
    `script-src 'unsafe-inline' ${csp.resourceDomains?.join(" ") ?? ""}`.trim(),
    `style-src 'unsafe-inline' ${csp.resourceDomains?.join(" ") ?? ""}`.trim(),
    `img-src data: ${csp.resourceDomains?.join(" ") ?? ""}`.trim(),
    `connect-src ${list(csp.connectDomains)}`,
    `frame-src ${list(csp.frameDomains)}`,
    "base-uri 'none'",
  ].join("; ");
}

async function main() {
  const client = new Client({ name: "billingd-test-host", version: "1" },
    { capabilities: { extensions: { [APPS]: { mimeTypes: [MIME] } } } });
  await client.connect(new StreamableHTTPClientTransport(new URL("/mcp", location.href),
    { requestInit: { headers: { Authorization: "Bearer " + params.get("token") } } }));

  const { tools } = await client.listTools();
  const tool = tools.find((t) => t.name === params.get("tool"));
  const uri = getToolUiResourceUri(tool);
  const { contents } = await client.readResource({ uri });
  const view = contents.find((c) => c.mimeType === MIME);

  // The model's turn: the first call. Keep what the model would read.
  const args = {};
  if (params.get("to")) args.to = params.get("to");
  if (params.get("quantity")) args.quantity = Number(params.get("quantity"));
  if (params.get("at")) args.at = params.get("at");
  const result = await client.callTool({ name: tool.name, arguments: args });
  window.modelSaw = JSON.stringify({ content: result.content, structuredContent: result.structuredContent });

  const iframe = document.getElementById("app-frame");
  const bridge = new AppBridge(client, { name: "billingd-test-host", version: "1" }, { openLinks: {}, serverTools: {}, updateModelContext: { text: {} } });
  bridge.onopenlink = async ({ url }) => { window.openedLinks.push(url); return {}; };
  bridge.onupdatemodelcontext = async (update) => { window.modelContext.push(JSON.stringify(update)); return {}; };
  bridge.onsizechange = ({ height }) => { if (height) iframe.style.height = Math.ceil(height) + "px"; };
  bridge.oninitialized = async () => {
    await bridge.sendToolInput({ arguments: args });
    await bridge.sendToolResult(result);
    status("view ready");
  };
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  const policy = `<meta http-equiv="Content-Security-Policy" content="${cspFor(view._meta)}">`;
  iframe.srcdoc = view.text.replace("<head>", "<head>" + policy);
}

main().catch((e) => { status("host error: " + e.message); console.error(e); });
