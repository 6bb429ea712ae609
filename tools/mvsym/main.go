// Command mvsym helps split a Go package: before files move to another
// package, it renames (exports) what they declare, qualifies the uses of
// those names in the files that stay (and in the package's external
// tests), and reports what the moving files still use of the package (the
// seams left to cut by hand). It edits files in place and moves nothing:
// git mv the files and change their package clause afterwards.
//
//	go run ./tools/mvsym -pkg ./apiserver -files a.go,b.go \
//	    -dst github.com/sqlkube/sqlkube/apiserver/x -name x \
//	    -rename oldName=NewName,... [-n]
//
// -n only reports. -srcpath/-srcname also qualify the source package's
// exported names the moving files use (when they will import it).
// -renameonly applies -rename to the listed files' declarations and all
// their uses, and moves nothing. It was written for the apiserver split
// (docs/architecture.md).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/ast/astutil"
	"golang.org/x/tools/go/packages"
)

type edit struct {
	off, end int
	text     string
}

func main() {
	pkgPat := flag.String("pkg", "", "package pattern")
	files := flag.String("files", "", "comma-separated base names of moved files")
	dstPath := flag.String("dst", "", "import path of the destination package")
	dstName := flag.String("name", "", "destination package name (qualifier)")
	renames := flag.String("rename", "", "old=New,...")
	dry := flag.Bool("n", false, "only report")
	srcPath := flag.String("srcpath", "", "import path of the source package: its package-level names used by the moved files get qualified")
	srcName := flag.String("srcname", "", "the source package's name")
	renameOnly := flag.Bool("renameonly", false, "rename the listed files' declarations everywhere; move nothing")
	flag.Parse()
	moved := map[string]bool{}
	for _, f := range strings.Split(*files, ",") {
		moved[f] = true
	}
	ren := map[string]string{}
	if *renames != "" {
		for _, kv := range strings.Split(*renames, ",") {
			p := strings.SplitN(kv, "=", 2)
			ren[p[0]] = p[1]
		}
	}
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedImports | packages.NeedDeps, Tests: true}
	pkgs, err := packages.Load(cfg, *pkgPat)
	if err != nil {
		panic(err)
	}
	edits := map[string]map[int]edit{} // file -> off -> edit
	add := func(file string, e edit) {
		if edits[file] == nil {
			edits[file] = map[int]edit{}
		}
		edits[file][e.off] = e
	}
	needImport := map[string]bool{}
	needSrcImport := map[string]bool{}
	seams := map[string]bool{}
	var fset *token.FileSet
	for _, p := range pkgs {
		if strings.HasSuffix(p.ID, ".test") {
			continue
		}
		for _, e := range p.Errors {
			fmt.Println("ERR", p.ID, e)
		}
		fset = p.Fset
		ext := strings.HasSuffix(p.Name, "_test")
		base := p.PkgPath
		if ext {
			base = strings.TrimSuffix(base, "_test")
		}
		declMoved := func(obj types.Object) bool {
			if obj == nil || obj.Pkg() == nil || obj.Pkg().Path() != base || !obj.Pos().IsValid() {
				return false
			}
			return moved[filepath.Base(p.Fset.Position(obj.Pos()).Filename)]
		}
		isPkgLevel := func(obj types.Object) bool {
			return obj.Parent() != nil && obj.Parent() == obj.Pkg().Scope()
		}
		for i, f := range p.Syntax {
			fn := p.CompiledGoFiles[i]
			bn := filepath.Base(fn)
			inMoved := moved[bn] && !ext
			// selector parents
			selOf := map[*ast.Ident]*ast.SelectorExpr{}
			ast.Inspect(f, func(n ast.Node) bool {
				if s, ok := n.(*ast.SelectorExpr); ok {
					selOf[s.Sel] = s
				}
				return true
			})
			for id, obj := range p.TypesInfo.Defs {
				if obj == nil || p.Fset.Position(id.Pos()).Filename != fn {
					continue
				}
				if declMoved(obj) && !ext {
					if nn, ok := ren[obj.Name()]; ok && (isPkgLevel(obj) || isMethodOrField(obj)) {
						add(fn, edit{p.Fset.Position(id.Pos()).Offset, p.Fset.Position(id.End()).Offset, nn})
					}
				}
			}
			for id, obj := range p.TypesInfo.Uses {
				if obj == nil || p.Fset.Position(id.Pos()).Filename != fn {
					continue
				}
				if obj.Pkg() == nil || obj.Pkg().Path() != base {
					continue
				}
				off, end := p.Fset.Position(id.Pos()).Offset, p.Fset.Position(id.End()).Offset
				if declMoved(obj) {
					nn := obj.Name()
					if r, ok := ren[nn]; ok && (isPkgLevel(obj) || isMethodOrField(obj)) {
						nn = r
					}
					switch {
					case inMoved:
						if nn != obj.Name() {
							add(fn, edit{off, end, nn})
						}
					case ext:
						if isPkgLevel(obj) {
							if s, ok := selOf[id]; ok {
								so, se := p.Fset.Position(s.Pos()).Offset, p.Fset.Position(s.End()).Offset
								add(fn, edit{so, se, *dstName + "." + nn})
								needImport[fn] = true
							}
						} else if nn != obj.Name() {
							add(fn, edit{off, end, nn})
						}
					case *renameOnly:
						if nn != obj.Name() {
							add(fn, edit{off, end, nn})
						}
					default:
						if !token.IsExported(nn) {
							seams[fmt.Sprintf("EXPORT %s (used in %s)", describe(obj), bn)] = true
						}
						if isPkgLevel(obj) {
							if _, isSel := selOf[id]; !isSel {
								add(fn, edit{off, end, *dstName + "." + nn})
								needImport[fn] = true
							}
						} else if nn != obj.Name() {
							add(fn, edit{off, end, nn})
						}
					}
				} else if inMoved && *srcPath != "" && isPkgLevel(obj) && token.IsExported(obj.Name()) {
					if _, isSel := selOf[id]; !isSel {
						add(fn, edit{off, end, *srcName + "." + obj.Name()})
						needSrcImport[fn] = true
					}
				} else if inMoved && (isPkgLevel(obj) || isMethodOrField(obj)) {
					pos := p.Fset.Position(obj.Pos())
					if filepath.Base(pos.Filename) != bn {
						seams[fmt.Sprintf("%s uses %s (%s)", bn, describe(obj), filepath.Base(pos.Filename))] = true
					}
				}
			}
		}
	}
	var ss []string
	for s := range seams {
		ss = append(ss, s)
	}
	sort.Strings(ss)
	for _, s := range ss {
		fmt.Println("SEAM", s)
	}
	if *dry {
		for f, es := range edits {
			fmt.Println("EDITS", filepath.Base(f), len(es))
		}
		return
	}
	for f, es := range edits {
		src, err := os.ReadFile(f)
		if err != nil {
			panic(err)
		}
		var list []edit
		for _, e := range es {
			list = append(list, e)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].off > list[j].off })
		for _, e := range list {
			src = append(src[:e.off], append([]byte(e.text), src[e.end:]...)...)
		}
		if needImport[f] || needSrcImport[f] {
			fs := token.NewFileSet()
			af, err := parser.ParseFile(fs, f, src, parser.ParseComments)
			if err != nil {
				panic(fmt.Sprint(f, err))
			}
			if needImport[f] {
				astutil.AddImport(fs, af, *dstPath)
			}
			if needSrcImport[f] {
				astutil.AddImport(fs, af, *srcPath)
			}
			var buf bytes.Buffer
			if err := format.Node(&buf, fs, af); err != nil {
				panic(err)
			}
			src = buf.Bytes()
		}
		if out, err := format.Source(src); err == nil {
			src = out
		}
		if err := os.WriteFile(f, src, 0o644); err != nil {
			panic(err)
		}
		fmt.Println("wrote", filepath.Base(f), len(list))
	}
	_ = fset
}

func isMethodOrField(obj types.Object) bool {
	switch o := obj.(type) {
	case *types.Func:
		sig, _ := o.Type().(*types.Signature)
		return sig != nil && sig.Recv() != nil
	case *types.Var:
		return o.IsField()
	}
	return false
}

func describe(obj types.Object) string {
	if f, ok := obj.(*types.Func); ok {
		if sig, _ := f.Type().(*types.Signature); sig != nil && sig.Recv() != nil {
			return types.TypeString(sig.Recv().Type(), func(*types.Package) string { return "" }) + "." + f.Name()
		}
	}
	if v, ok := obj.(*types.Var); ok && v.IsField() {
		return "field " + v.Name()
	}
	return obj.Name()
}
