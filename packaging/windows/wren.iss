; Inno Setup 6 script: Wren's Windows installer (written and reviewed; built on Windows).
;   pyinstaller packaging\windows\wren.spec   then   iscc packaging\windows\wren.iss
; Installs dist\Wren\ per user (no administrator rights), a Start-menu entry, and on request
; a desktop icon and "start with Windows, in the tray" (wren-desktop --hidden from the
; user's Run key). Uninstalling removes the program and that Run entry; the user's data in
; %LOCALAPPDATA%\Wren stays unless they tick the box on the last page.

#define AppName "Wren"
#define AppVersion "0.1.0"
#define AppId "io.github.wren_assistant.Wren"
#define DistDir "..\..\dist\Wren"

[Setup]
AppId={{6B0F3A52-0D7E-4C44-9B1E-5E3C2A7D9A61}
AppName={#AppName}
AppVersion={#AppVersion}
AppVerName={#AppName} {#AppVersion}
AppPublisher=The Wren contributors
AppPublisherURL=https://github.com/wren-assistant/wren
DefaultDirName={localappdata}\Programs\Wren
DefaultGroupName=Wren
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\dist
OutputBaseFilename=Wren-{#AppVersion}-setup
SetupIconFile=..\..\build\pyinstaller\wren.ico
UninstallDisplayIcon={app}\wren-desktop.exe
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
; the app is single-instance: ask a running Wren to close before files are replaced
CloseApplications=yes
RestartApplications=no

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "Create a &desktop icon"; GroupDescription: "Shortcuts:"; Flags: unchecked
Name: "autostart"; Description: "Start Wren with &Windows, in the tray"; GroupDescription: "Start-up:"; Flags: unchecked
Name: "addtopath"; Description: "Add the &wren command to PATH"; GroupDescription: "Command line:"; Flags: unchecked

[Files]
Source: "{#DistDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\Wren"; Filename: "{app}\wren-desktop.exe"; AppUserModelID: "{#AppId}"; Comment: "A private AI assistant on your computer"
Name: "{autoprograms}\Wren Quick Prompt"; Filename: "{app}\wren-desktop.exe"; Parameters: "--quick"; AppUserModelID: "{#AppId}"
Name: "{autodesktop}\Wren"; Filename: "{app}\wren-desktop.exe"; Tasks: desktopicon; AppUserModelID: "{#AppId}"

[Registry]
; start with Windows, in the tray: only when the task was chosen; removed on uninstall
Root: HKCU; Subkey: "Software\Microsoft\Windows\CurrentVersion\Run"; ValueType: string; ValueName: "Wren"; \
    ValueData: """{app}\wren-desktop.exe"" --hidden"; Tasks: autostart; Flags: uninsdeletevalue
Root: HKCU; Subkey: "Environment"; ValueType: expandsz; ValueName: "Path"; ValueData: "{olddata};{app}"; \
    Tasks: addtopath; Check: NeedsAddPath(ExpandConstant('{app}'))

[Run]
Filename: "{app}\wren-desktop.exe"; Description: "Start Wren now"; Flags: nowait postinstall skipifsilent

[UninstallRun]
Filename: "{cmd}"; Parameters: "/C taskkill /IM wren-desktop.exe /F"; Flags: runhidden; RunOnceId: "StopWren"

[Code]
function NeedsAddPath(Dir: string): Boolean;
var
  Paths: string;
begin
  if not RegQueryStringValue(HKEY_CURRENT_USER, 'Environment', 'Path', Paths) then
  begin
    Result := True;
    exit;
  end;
  Result := Pos(';' + Uppercase(Dir) + ';', ';' + Uppercase(Paths) + ';') = 0;
end;

procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
var
  DataDir: string;
begin
  // Conversations, memories and models are the user's: kept unless they say otherwise.
  if CurUninstallStep = usPostUninstall then
  begin
    DataDir := ExpandConstant('{localappdata}\Wren');
    if DirExists(DataDir) and (MsgBox('Also delete your Wren data (conversations, memories, settings and models) in ' +
        DataDir + '?', mbConfirmation, MB_YESNO or MB_DEFBUTTON2) = IDYES) then
      DelTree(DataDir, True, True, True);
  end;
end;
