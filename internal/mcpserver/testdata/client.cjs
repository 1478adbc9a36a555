// An agent through the official TypeScript MCP SDK's client: pinfold mcp
// over stdio (PINFOLD, WS), then serve's /mcp over streamable HTTP
// (MCP_URL, MCP_TOKEN). TestTypeScriptClient runs it; it exits non-zero
// on the first assertion that fails.
const assert = require('node:assert');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');

async function use(transport, label) {
  const c = new Client({ name: 'pinfold-ts-test', version: '1' });
  await c.connect(transport);
  const names = (await c.listTools()).tools.map((t) => t.name);
  for (const want of ['run', 'session_start', 'session_exec', 'session_stop', 'file_read', 'file_write', 'file_list', 'diff']) {
    assert.ok(names.includes(want), `${label}: no ${want} in ${names}`);
  }
  assert.ok(!names.includes('apply') && !names.includes('discard'), `${label}: apply offered: ${names}`);

  const st = await c.callTool({ name: 'session_start', arguments: {} });
  const id = st.structuredContent.id;
  assert.ok(id, `${label}: session_start: ${JSON.stringify(st)}`);
  let r = await c.callTool({ name: 'file_write', arguments: { session: id, path: 'ts/from-node.txt', content: 'written by node\n' } });
  assert.ok(!r.isError, `${label}: file_write: ${JSON.stringify(r)}`);
  r = await c.callTool({ name: 'session_exec', arguments: { session: id, command: ['sh', '-c', 'cat ts/from-node.txt; exit 4'] } });
  assert.ok(r.isError, `${label}: exit 4 is an error`);
  assert.strictEqual(r.structuredContent.exit_code, 4);
  assert.strictEqual(r.structuredContent.stdout, 'written by node\n');
  r = await c.callTool({ name: 'file_list', arguments: { session: id, path: 'ts' } });
  assert.deepStrictEqual(r.structuredContent.entries.map((e) => e.name), ['from-node.txt']);
  r = await c.callTool({ name: 'file_read', arguments: { session: id, path: 'ts/from-node.txt' } });
  assert.strictEqual(r.structuredContent.content, 'written by node\n');
  r = await c.callTool({ name: 'session_stop', arguments: { session: id } });
  assert.notStrictEqual(r.structuredContent.state, 'running');
  r = await c.callTool({ name: 'diff', arguments: { session: id } });
  assert.match(r.structuredContent.diff, /\+written by node/);

  r = await c.callTool({ name: 'run', arguments: { command: ['sh', '-c', 'echo via-run > ran.txt; echo out'] } });
  assert.ok(!r.isError, `${label}: run: ${JSON.stringify(r)}`);
  assert.strictEqual(r.structuredContent.stdout, 'out\n');
  // The owner's run is pinfold run, with a changeset; a tenant's is a session.
  const ran = r.structuredContent;
  const ref = ran.changeset ? { changeset: ran.changeset.id } : { session: ran.session.id };
  assert.strictEqual(!!ran.changeset, label === 'stdio', `${label}: run: ${JSON.stringify(ran)}`);
  const d = await c.callTool({ name: 'diff', arguments: { ...ref, format: 'name-status' } });
  assert.match(d.structuredContent.diff, /ran\.txt/);

  // apply is no tool here: an error, whichever way the SDK reports it.
  let refused = false;
  try {
    const a = await c.callTool({ name: 'apply', arguments: { session: id } });
    refused = !!a.isError;
  } catch (e) {
    refused = true;
  }
  assert.ok(refused, `${label}: apply was not refused`);
  await c.close();
  console.log(`${label}: ok`);
}

(async () => {
  await use(new StdioClientTransport({
    command: process.env.PINFOLD, args: ['mcp', '--workspace', process.env.WS],
    env: { ...process.env }, stderr: 'inherit',
  }), 'stdio');
  await use(new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
    requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_TOKEN}` } },
  }), 'http');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
