// An MCP client nobody here wrote (the official TypeScript SDK's, from npm)
// against `sandbox mcp` over stdio, or serve's /mcp over streamable HTTP: it
// lists the tools and calls run_python. Run by `make mcp-test`, which
// installs the SDK outside the repository, and by the e2e suite's TestMCP:
//
//   SANDBOX_NPM_DIR=/var/cache/sandbox-npm SANDBOX_BIN=bin/sandbox node client.mjs [sandbox mcp flags...]
//   SANDBOX_NPM_DIR=/var/cache/sandbox-npm SANDBOX_MCP_URL=http://127.0.0.1:8080/mcp SANDBOX_TOKEN_FILE=token node client.mjs
//
// With no flags it starts `sandbox mcp --backend local`.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const npmDir = process.env.SANDBOX_NPM_DIR;
const bin = process.env.SANDBOX_BIN;
const url = process.env.SANDBOX_MCP_URL;
if (!npmDir || !(bin || url)) {
  console.error("client.mjs: set SANDBOX_NPM_DIR (where the SDK is installed) and SANDBOX_BIN (the sandbox binary) or SANDBOX_MCP_URL");
  process.exit(2);
}
// The SDK lives outside the repository, where ESM resolution does not look.
const require = createRequire(join(npmDir, "package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const here = dirname(fileURLToPath(import.meta.url));
const chart = readFileSync(join(here, "chart.py"), "utf8");
const flags = process.argv.slice(2).length ? process.argv.slice(2) : ["--backend", "local"];

function httpTransport() {
  const headers = {};
  if (process.env.SANDBOX_TOKEN_FILE) {
    headers.Authorization = `Bearer ${readFileSync(process.env.SANDBOX_TOKEN_FILE, "utf8").trim()}`;
  }
  return new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
}
const transport = url ? httpTransport() : new StdioClientTransport({ command: bin, args: ["mcp", ...flags], stderr: "inherit" });
const client = new Client({ name: "sandbox-mcp-test", version: "1" });
await client.connect(transport);

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok: ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL: ${name}: ${e.message}`);
  }
}
function expect(cond, what) {
  if (!cond) throw new Error(what);
}
// run calls run_python, waiting out a sandbox service with no free sandbox
// (a warm pool refilling: the protocol error -32050 with status 503) as an
// agent's host would.
async function run(args) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await client.callTool({ name: "run_python", arguments: args }, undefined, { timeout: 60000 });
    } catch (e) {
      const data = e.data || {};
      if (e.code !== -32050 || data.status !== 503 || attempt >= 30) throw e;
      await new Promise((r) => setTimeout(r, 1000 * Math.max(1, data.retry_after_s || 1)));
    }
  }
}

await check("lists run_python", async () => {
  const { tools } = await client.listTools();
  expect(tools.length === 1 && tools[0].name === "run_python", `tools: ${JSON.stringify(tools.map((t) => t.name))}`);
  expect(JSON.stringify(tools[0].inputSchema.required) === '["code"]', "code is not the one required argument");
});

await check("runs a snippet", async () => {
  const res = await run({ code: "print(6*7)" });
  const text = res.content[0].text;
  expect(!res.isError && text.includes("exit code: 0") && text.includes("stdout:\n42"), `result: ${text}`);
});

await check("a failing snippet is a result", async () => {
  const res = await run({ code: "import sys; sys.exit(3)" });
  expect(!res.isError && res.content[0].text.includes("exit code: 3"), `result: ${JSON.stringify(res)}`);
});

await check("an image and a file come back", async () => {
  const res = await run({ code: chart, outputs: ["out/*"] });
  const kinds = res.content.map((c) => c.type).join(",");
  expect(kinds === "text,image,resource", `content types: ${kinds}`);
  const png = Buffer.from(res.content[1].data, "base64");
  expect(res.content[1].mimeType === "image/png" && png.subarray(1, 4).toString() === "PNG", "not a PNG");
  const csv = res.content[2].resource;
  expect(csv.uri.endsWith("/out/stats.csv") && csv.text === "a,b\n1,2\n", `resource: ${JSON.stringify(csv)}`);
});

await check("a request the sandbox refuses is a tool error", async () => {
  const res = await run({ code: "pass", outputs: ["../*"] });
  expect(res.isError && res.content[0].text.startsWith("error: the sandbox refused the call"), JSON.stringify(res));
});

await check("arguments against the schema are a tool error", async () => {
  const res = await run({ code: "pass", timeout_s: 999 });
  expect(res.isError, JSON.stringify(res));
});

await client.close();
console.log(`mcp: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
