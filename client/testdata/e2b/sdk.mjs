// What an agent framework does with E2B's SDK, against pinfold serve:
// run by TestE2BSDK (client/e2b_test.go) with E2B_API_URL, E2B_SANDBOX_URL
// and E2B_API_KEY set, and E2B_NODE_DIR the directory e2b@2.51.0 is
// installed in. It prints "ok NAME" per step and exits non-zero on the
// first failure.
import { createRequire } from 'node:module'
import assert from 'node:assert/strict'

const require = createRequire(process.env.E2B_NODE_DIR + '/')
const { Sandbox, CommandExitError, FilesystemEventType } = require('e2b')

const mode = process.argv[2] || 'functions'
const ok = (name) => console.log('ok ' + name)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function functions() {
  const sbx = await Sandbox.create('base', { timeoutMs: 120_000, metadata: { purpose: 'e2e' }, envs: { GREETING: 'hello' } })
  ok('create ' + sbx.sandboxId)

  // Foreground, with the sandbox's envs and the command's own.
  let r = await sbx.commands.run('echo $GREETING $OTHER; echo err >&2', { envs: { OTHER: 'world' } })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello world\n')
  assert.equal(r.stderr, 'err\n')
  ok('run foreground')

  // A non-zero exit throws CommandExitError, carrying the output.
  await assert.rejects(sbx.commands.run('echo out; exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3 && e.stdout === 'out\n')
  ok('run non-zero exit')

  // A user (sent as Basic auth) is accepted; commands run as the session's.
  r = await sbx.commands.run('echo ok', { user: 'root' })
  assert.equal(r.stdout, 'ok\n')

  // Without stdin: true, a command reads an empty stdin.
  r = await sbx.commands.run('cat; echo done')
  assert.equal(r.stdout, 'done\n')

  // cwd
  r = await sbx.commands.run('pwd', { cwd: '/tmp' })
  assert.equal(r.stdout, '/tmp\n')
  ok('run cwd')

  // Streamed output, as it comes.
  const chunks = []
  r = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.1; done', { onStdout: (d) => chunks.push(d) })
  assert.equal(chunks.join(''), 'line1\nline2\nline3\n')
  assert.ok(chunks.length >= 2, 'output arrived in pieces: ' + JSON.stringify(chunks))
  ok('run streamed')

  // Background, listed, then killed.
  const bg = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  assert.ok(bg.pid > 0)
  const procs = await sbx.commands.list()
  assert.ok(procs.some((p) => p.pid === bg.pid && p.args.join(' ').includes('sleep 600')), JSON.stringify(procs))
  assert.equal(await sbx.commands.kill(bg.pid), true)
  await assert.rejects(bg.wait(), (e) => e instanceof CommandExitError)
  assert.equal(await sbx.commands.kill(bg.pid), false)
  ok('run background and kill')

  // stdin: sent, then closed.
  const cat = await sbx.commands.run('cat', { background: true, stdin: true, timeoutMs: 0 })
  await sbx.commands.sendStdin(cat.pid, 'to stdin\n')
  await sbx.commands.closeStdin(cat.pid)
  r = await cat.wait()
  assert.equal(r.stdout, 'to stdin\n')
  ok('stdin')

  // Connect to a running command.
  const late = await sbx.commands.run('sleep 0.5; echo late', { background: true, timeoutMs: 0 })
  const again = await sbx.commands.connect(late.pid)
  r = await again.wait()
  assert.equal(r.exitCode, 0)
  ok('connect')

  // A terminal, resized.
  let out = ''
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += new TextDecoder().decode(d) }, timeoutMs: 0 })
  await sbx.pty.resize(pty.pid, { cols: 100, rows: 40 })
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; exit\n'))
  await pty.wait().catch(() => {})
  assert.match(out, /40 100/)
  ok('pty resize')

  // Files: one and many, read, list, exists, rename, remove.
  await sbx.files.write('notes/a.txt', 'alpha')
  await sbx.files.write([{ path: 'notes/b.txt', data: 'beta' }, { path: '/tmp/c.txt', data: 'gamma' }])
  assert.equal(await sbx.files.read('notes/a.txt'), 'alpha')
  assert.equal(await sbx.files.read('notes/b.txt'), 'beta')
  assert.equal(await sbx.files.read('/tmp/c.txt'), 'gamma')
  const names = (await sbx.files.list('notes')).map((e) => e.name).sort()
  assert.deepEqual(names, ['a.txt', 'b.txt'])
  assert.equal(await sbx.files.exists('notes/a.txt'), true)
  assert.equal(await sbx.files.exists('notes/none'), false)
  await sbx.files.rename('notes/b.txt', 'notes/b2.txt')
  assert.equal(await sbx.files.exists('notes/b.txt'), false)
  assert.equal(await sbx.files.read('notes/b2.txt'), 'beta')
  await sbx.files.remove('notes/b2.txt')
  assert.equal(await sbx.files.exists('notes/b2.txt'), false)
  assert.equal(await sbx.files.makeDir('made/deep'), true)
  assert.equal(await sbx.files.makeDir('made/deep'), false)
  // The octet-stream upload, gzip-compressed, and a gzip download.
  await sbx.files.write('deep/new/z.txt', 'zipped '.repeat(100), { gzip: true })
  assert.equal(await sbx.files.read('deep/new/z.txt', { gzip: true }), 'zipped '.repeat(100))
  const bytes = await sbx.files.read('deep/new/z.txt', { format: 'bytes' })
  assert.equal(bytes.length, 700)
  const info = await sbx.files.getInfo('deep/new/z.txt')
  assert.equal(info.type, 'file')
  assert.equal(info.size, 700)
  r = await sbx.commands.run('cat notes/a.txt')
  assert.equal(r.stdout, 'alpha')
  ok('files')

  // Watch a directory.
  const events = []
  const watcher = await sbx.files.watchDir('notes', (e) => events.push(e), { timeoutMs: 0 })
  await sbx.files.write('notes/w.txt', 'watched')
  for (let i = 0; i < 50 && !events.some((e) => e.name === 'w.txt' && e.type === FilesystemEventType.CREATE); i++) await sleep(100)
  await watcher.stop()
  assert.ok(events.some((e) => e.name === 'w.txt' && e.type === FilesystemEventType.CREATE), JSON.stringify(events))
  ok('watch')

  // Info, list, timeout, metrics.
  const sinfo = await sbx.getInfo()
  assert.equal(sinfo.sandboxId, sbx.sandboxId)
  assert.equal(sinfo.templateId, 'base')
  assert.deepEqual(sinfo.metadata, { purpose: 'e2e' })
  const page = await Sandbox.list({ query: { metadata: { purpose: 'e2e' } } }).nextItems()
  assert.ok(page.some((s) => s.sandboxId === sbx.sandboxId))
  // Paging: two sandboxes of this metadata, one a page.
  const other = await Sandbox.create('base', { timeoutMs: 60_000, metadata: { purpose: 'e2e' } })
  const pager = Sandbox.list({ query: { metadata: { purpose: 'e2e' } }, limit: 1 })
  const seen = [...(await pager.nextItems())]
  assert.equal(seen.length, 1)
  assert.equal(pager.hasNext, true)
  seen.push(...(await pager.nextItems()))
  assert.equal(pager.hasNext, false)
  assert.deepEqual(seen.map((s) => s.sandboxId).sort(), [sbx.sandboxId, other.sandboxId].sort())
  await other.kill()
  await sbx.setTimeout(60_000)
  await sbx.getMetrics()
  assert.equal(await sbx.isRunning(), true)
  ok('info list timeout metrics')

  // Pause and resume: the files and the sandbox are as they were.
  await sbx.pause()
  assert.equal(await sbx.isRunning(), false)
  const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
  assert.deepEqual(paused.map((s) => [s.sandboxId, s.state]), [[sbx.sandboxId, 'paused']])
  const back = await Sandbox.connect(sbx.sandboxId)
  assert.equal(await back.files.read('notes/a.txt'), 'alpha')
  ok('pause resume')

  // What it wrote in the workspace is the session's changeset: printed
  // for the Go test, which reviews it with pinfold's own API.
  console.log('session ' + sbx.sandboxId)

  // Kill, and what a killed sandbox answers.
  assert.equal(await back.kill(), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  assert.equal(await back.isRunning(), false)
  await assert.rejects(back.commands.run('true'), (e) => /not running|not found|killed|timeout/i.test(e.message) || e.name === 'TimeoutError')
  ok('kill')
}

// Many sandboxes, N at once, each created, used and killed.
async function load(total, parallel) {
  let next = 0
  let failures = 0
  const worker = async () => {
    while (next < total) {
      const i = next++
      try {
        const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
        const r = await sbx.commands.run('echo ' + i)
        assert.equal(r.stdout, i + '\n')
        await sbx.files.write('/tmp/f', 'x' + i)
        assert.equal(await sbx.files.read('/tmp/f'), 'x' + i)
        assert.equal(await sbx.kill(), true)
      } catch (e) {
        failures++
        console.log('fail ' + i + ': ' + (e.stack || e))
      }
    }
  }
  await Promise.all(Array.from({ length: parallel }, worker))
  console.log(`load ${total} sandboxes, ${parallel} at once: ${failures} failures`)
  if (failures) process.exit(1)
  ok('load')
}

// Rounds of create, commands.run('true') and kill, one at a time: the
// milliseconds of each, for bench/e2b.
async function bench(n) {
  const times = []
  for (let i = 0; i < n; i++) {
    const t0 = performance.now()
    const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
    await sbx.commands.run('true')
    await sbx.kill()
    times.push((performance.now() - t0).toFixed(3))
  }
  console.log('bench ' + times.join(' '))
}

if (mode === 'bench') await bench(Number(process.argv[3] || 10))
else if (mode === 'load') await load(Number(process.argv[3] || 100), Number(process.argv[4] || 20))
else await functions()
